#include "model/generation/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace model {

Sampler::Sampler(const SamplerOptions& options) : o_(options), state_(options.seed) {
  if (!(o_.temperature >= 0) || !std::isfinite(o_.temperature))
    throw std::runtime_error("temperature must be a finite number >= 0");
  if (!(o_.top_p > 0 && o_.top_p <= 1)) throw std::runtime_error("top-p must be in (0, 1]");
  if (!(o_.repeat_penalty > 0) || !std::isfinite(o_.repeat_penalty))
    throw std::runtime_error("the repeat penalty must be a finite number > 0");
  if (o_.repeat_last_n < -1) throw std::runtime_error("repeat-last-n must be -1 or more");
  if (!(std::fabs(o_.presence_penalty) <= 2))
    throw std::runtime_error("the presence penalty must be in [-2, 2]");
  if (!(std::fabs(o_.frequency_penalty) <= 2))
    throw std::runtime_error("the frequency penalty must be in [-2, 2]");
}

void penalize(std::span<float> logits, const SamplerOptions& o, const History& h) {
  auto sorted = [&](std::span<const int32_t> ids) {
    std::vector<int32_t> v(ids.begin(), ids.end());
    std::sort(v.begin(), v.end());
    if (!v.empty() && (v.front() < 0 || size_t(v.back()) >= logits.size()))
      throw std::runtime_error("penalties: token id " +
                               std::to_string(v.front() < 0 ? v.front() : v.back()) +
                               " is outside the vocabulary of " + std::to_string(logits.size()));
    return v;
  };
  if (o.repeat_penalty != 1.0f) {
    std::vector<int32_t> ids = sorted(h.repeated);
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (int32_t id : ids) {
      float& x = logits[size_t(id)];
      x = x > 0 ? x / o.repeat_penalty : x * o.repeat_penalty;
    }
  }
  if (o.presence_penalty != 0.0f || o.frequency_penalty != 0.0f) {
    const std::vector<int32_t> ids = sorted(h.counted);
    for (size_t i = 0; i < ids.size();) {
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i]) j++;
      logits[size_t(ids[i])] -= float(j - i) * o.frequency_penalty + o.presence_penalty;
      i = j;
    }
  }
}

std::span<const int32_t> Sampler::recent(std::span<const int32_t> seq, size_t context) const {
  const size_t n = o_.repeat_last_n < 0 ? context : size_t(o_.repeat_last_n);
  return seq.last(std::min(n, seq.size()));
}

uint32_t Sampler::candidates(uint32_t n_vocab) const {
  if (o_.penalized()) return 0;
  if (o_.temperature == 0) return 1;
  if (o_.top_k > 0 && o_.top_k <= Model::kMaxCandidates) return std::min(o_.top_k, n_vocab);
  return 0;
}

// splitmix64: a fixed generator, so a seed gives the same text on every platform and library
// (std::uniform_real_distribution does not promise that).
double Sampler::uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t Sampler::pick(const Candidates& c, const History& h) {
  if (c.logits.empty()) throw std::runtime_error("sampler: no candidates");
  std::span<const float> logits = c.logits;
  if (o_.penalized()) {
    if (!c.ids.empty())
      throw std::runtime_error("sampler: a penalty needs all logits, not a top-k (candidates())");
    penalized_.assign(c.logits.begin(), c.logits.end());
    penalize(penalized_, o_, h);
    logits = penalized_;
  }
  // Candidates as (id, logit), best first: the GPU's top-k comes sorted; all V logits get
  // sorted here (ties to the lower id, as the GPU's).
  std::vector<std::pair<int32_t, double>> cand;
  if (c.ids.empty()) {
    // Best first, ties to the lower id; only as far as the draw can reach (the best one when
    // greedy, top_k when it cuts), since sorting all V logits every token costs milliseconds.
    cand.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); i++)
      cand.emplace_back(static_cast<int32_t>(i), std::isnan(logits[i]) ? -INFINITY : logits[i]);
    const auto better = [](const auto& a, const auto& b) {
      return a.second > b.second || (a.second == b.second && a.first < b.first);
    };
    const size_t reach = o_.temperature == 0 ? 1
                         : o_.top_k > 0      ? std::min<size_t>(o_.top_k, cand.size())
                                             : cand.size();
    std::partial_sort(cand.begin(), cand.begin() + long(reach), cand.end(), better);
    // Hugging Face's top-k keeps every logit tied with the k-th too.
    size_t kept = reach;
    if (o_.temperature_first && o_.temperature > 0 && reach < cand.size()) {
      const double kth = cand[reach - 1].second;
      const auto tied = std::partition(cand.begin() + long(reach), cand.end(),
                                       [kth](const auto& e) { return e.second == kth; });
      std::sort(cand.begin() + long(reach), tied, better);
      kept = static_cast<size_t>(tied - cand.begin());
    }
    cand.resize(kept);
  } else {
    for (size_t i = 0; i < c.ids.size(); i++) cand.emplace_back(c.ids[i], c.logits[i]);
  }
  if (o_.temperature == 0 || !std::isfinite(cand.front().second)) return cand.front().first;
  if (o_.top_k > 0 && cand.size() > o_.top_k && !o_.temperature_first) cand.resize(o_.top_k);

  // top-p on the probabilities at temperature 1, as llama.cpp's chain does (or at the
  // temperature, as Hugging Face's): the smallest prefix whose mass reaches p (at least one
  // token).
  const double top = cand.front().second;
  const double at = o_.temperature_first ? double{o_.temperature} : 1.0;
  std::vector<double> p(cand.size());
  for (size_t i = 0; i < cand.size(); i++) p[i] = std::exp((cand[i].second - top) / at);
  const double sum = std::accumulate(p.begin(), p.end(), 0.0);
  size_t keep = cand.size();
  double mass = 0;
  // top-p 1 keeps all (Hugging Face's skips the cut; summing could drop a tail by rounding).
  for (size_t i = 0; o_.top_p < 1 && i < cand.size(); i++) {
    mass += p[i] / sum;
    if (mass >= double{o_.top_p}) {
      keep = i + 1;
      break;
    }
  }
  cand.resize(keep);

  // Temperature, then a draw from the renormalised distribution.
  std::vector<double> q(cand.size());
  for (size_t i = 0; i < cand.size(); i++) q[i] = std::exp((cand[i].second - top) / double{o_.temperature});
  const double total = std::accumulate(q.begin(), q.end(), 0.0);
  double r = uniform() * total;
  for (size_t i = 0; i < cand.size(); i++) {
    r -= q[i];
    if (r < 0) return cand[i].first;
  }
  return cand.back().first;
}

}  // namespace model
