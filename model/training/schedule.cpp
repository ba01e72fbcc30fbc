#include "model/training/schedule.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace model::training {

Batches::Batches(std::span<const int32_t> tokens, uint32_t B, uint32_t T, uint64_t position)
    : tokens_(tokens), B_(B), T_(T), position_(position) {
  const uint64_t need = uint64_t{B} * T + 1;
  if (B == 0 || T == 0) throw std::invalid_argument("the batch and the context must be at least 1");
  if (tokens.size() < need)
    throw std::invalid_argument("the data holds " + std::to_string(tokens.size()) +
                                " tokens; a step of B=" + std::to_string(B) + " sequences of T=" +
                                std::to_string(T) + " needs " + std::to_string(need));
  if (position >= tokens.size())
    throw std::invalid_argument("the data position " + std::to_string(position) +
                                " is past the data's " + std::to_string(tokens.size()) + " tokens");
}

void Batches::next(std::vector<int32_t>& ids, std::vector<int32_t>& targets) {
  const uint64_t n = uint64_t{B_} * T_;
  // Written so that no sum can wrap (the constructor holds tokens >= n + 1): position_ + n + 1
  // once overflowed for a position near 2^64 and read past the data.
  if (position_ > tokens_.size() - n - 1) position_ = 0;
  ids.assign(tokens_.begin() + static_cast<std::ptrdiff_t>(position_),
             tokens_.begin() + static_cast<std::ptrdiff_t>(position_ + n));
  targets.assign(tokens_.begin() + static_cast<std::ptrdiff_t>(position_ + 1),
                 tokens_.begin() + static_cast<std::ptrdiff_t>(position_ + n + 1));
  position_ += n;
}

double learning_rate(const Schedule& s, uint64_t step) {
  if (step < s.warmup) return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup);
  if (!s.cosine || s.steps <= s.warmup) return s.lr;
  const double progress = static_cast<double>(step - s.warmup) / static_cast<double>(s.steps - s.warmup);
  return s.lr_min + 0.5 * (s.lr - s.lr_min) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace model::training
