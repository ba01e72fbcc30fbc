// The training contract's data order and learning-rate schedule (issue 17), as plain functions
// any implementation can be checked against (tools/ holds PyTorch's side).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace model::training {

// llm.c's data loader, unshuffled: step s takes B * T + 1 tokens from position p; p starts at 0
// and advances by B * T per step, restarting at 0 first when p + B * T + 1 would pass the end.
// Row b's inputs are tokens [p + b T, p + b T + T), its targets the same shifted by one.
class Batches {
 public:
  // Throws std::invalid_argument when the tokens hold fewer than B * T + 1, or when `position`
  // (a resumed run's) is not before the last token.
  Batches(std::span<const int32_t> tokens, uint32_t B, uint32_t T, uint64_t position = 0);
  // The next step's ids and targets ([B, T] each), then advances.
  void next(std::vector<int32_t>& ids, std::vector<int32_t>& targets);
  uint64_t position() const { return position_; }  // where the next step starts

 private:
  std::span<const int32_t> tokens_;
  uint32_t B_, T_;
  uint64_t position_;
};

// The learning rate of step s (0-based) of N: below W warm-up steps lr (s + 1) / W; then lr, or
// with cosine lr_min + (lr - lr_min) (1 + cos(pi (s - W) / (N - W))) / 2.
struct Schedule {
  double lr = 3e-4;
  uint64_t warmup = 0;
  bool cosine = false;
  double lr_min = 0;
  uint64_t steps = 1;  // N
};
double learning_rate(const Schedule& schedule, uint64_t step);

}  // namespace model::training
