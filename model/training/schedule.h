// The training contract's data orders (issues 17 and 41) and learning-rate schedule, as plain
// functions any implementation can be checked against (tools/ holds PyTorch's side).
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

// splitmix64 (Steele, Lea and Flood 2014; Vigna's reference code), the generator of the random
// windows: state += 0x9e3779b97f4a7c15, then z = state, z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9,
// z = (z ^ z >> 27) * 0x94d049bb133111eb, and z ^ z >> 31 is the draw (all mod 2^64).
uint64_t splitmix64(uint64_t& state);
// A draw uniform in [0, n), n >= 1, without bias: draws x of splitmix64 until x < 2^64 - (2^64
// mod n), then x mod n (mostly one draw: the rejected share is below n / 2^64).
uint64_t uniform_below(uint64_t& state, uint64_t n);

// nanoGPT's get_batch with a generator specified exactly: each of the step's `rows` rows is the
// window of T + 1 tokens at offset o = uniform_below(state, tokens - T), drawn row after row
// (row r of micro-batch m is row m B + r), its inputs tokens [o, o + T) and its targets
// [o + 1, o + T + 1). A new run's state is its --seed; trainer_state.json keeps it between steps.
class RandomWindows {
 public:
  // Throws std::invalid_argument when the tokens hold fewer than T + 1 (no window fits).
  RandomWindows(std::span<const int32_t> tokens, uint32_t rows, uint32_t T, uint64_t state);
  // The next step's ids and targets ([rows, T] each), then advances the generator.
  void next(std::vector<int32_t>& ids, std::vector<int32_t>& targets);
  uint64_t state() const { return state_; }  // the generator's state before the next step

 private:
  std::span<const int32_t> tokens_;
  uint32_t rows_, T_;
  uint64_t state_;
};

// An encoder-decoder's steps (pairs.h): each of the step's `rows` rows is pair
// uniform_below(state, n) of n, drawn row after row, with replacement as the windows are.
std::vector<uint64_t> random_pairs(uint64_t& state, uint64_t n, uint32_t rows);

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
