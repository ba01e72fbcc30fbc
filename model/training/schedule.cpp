#include "model/training/schedule.h"

#include <algorithm>
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

uint64_t splitmix64(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t uniform_below(uint64_t& state, uint64_t n) {
  if (n == 0) throw std::invalid_argument("uniform_below needs n >= 1");
  // 2^64 mod n, in 64 bits: (2^64 - n) mod n. The draws at or above 2^64 - rem would favour the
  // low residues; rem = 0 rejects nothing.
  const uint64_t rem = (0 - n) % n;
  for (;;) {
    const uint64_t x = splitmix64(state);
    if (rem == 0 || x < 0 - rem) return x % n;
  }
}

RandomWindows::RandomWindows(std::span<const int32_t> tokens, uint32_t rows, uint32_t T,
                             uint64_t state)
    : tokens_(tokens), rows_(rows), T_(T), state_(state) {
  if (rows == 0 || T == 0) throw std::invalid_argument("the batch and the context must be at least 1");
  if (tokens.size() < uint64_t{T} + 1)
    throw std::invalid_argument("the data holds " + std::to_string(tokens.size()) +
                                " tokens; a window of T=" + std::to_string(T) + " needs " +
                                std::to_string(uint64_t{T} + 1));
}

void RandomWindows::next(std::vector<int32_t>& ids, std::vector<int32_t>& targets) {
  ids.resize(size_t{rows_} * T_);
  targets.resize(ids.size());
  for (uint32_t r = 0; r < rows_; r++) {
    const uint64_t o = uniform_below(state_, tokens_.size() - T_);
    std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(o), T_,
                ids.begin() + static_cast<std::ptrdiff_t>(size_t{r} * T_));
    std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(o + 1), T_,
                targets.begin() + static_cast<std::ptrdiff_t>(size_t{r} * T_));
  }
}

std::vector<uint64_t> random_pairs(uint64_t& state, uint64_t n, uint32_t rows) {
  std::vector<uint64_t> out(rows);
  for (uint64_t& r : out) r = uniform_below(state, n);
  return out;
}

double learning_rate(const Schedule& s, uint64_t step) {
  if (step < s.warmup) return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup);
  if (!s.cosine || s.steps <= s.warmup) return s.lr;
  const double progress = static_cast<double>(step - s.warmup) / static_cast<double>(s.steps - s.warmup);
  return s.lr_min + 0.5 * (s.lr - s.lr_min) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace model::training
