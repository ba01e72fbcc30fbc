#include "model/forward/submissions.h"

#include <algorithm>
#include <cmath>

namespace model {

double block_seconds(const Config& c, uint32_t T, uint32_t L, DType weights,
                     const SubmissionRates& rates) {
  const double C = c.n_embd, A = c.attn_width(), t = T, l = std::max(L, T);
  // c_attn [C, 3A] and c_proj [A, C], cross-attention's query and output projections, then c_fc
  // (a gated MLP's two halves) and the MLP's c_proj.
  const double mlp = (c.gated_mlp ? 3 : 2) * C * c.n_inner;
  const double params = 4 * C * A + (c.cross_attention ? 2 * C * A : 0) + (c.attention_only ? 0 : mlp);
  const double tiles = std::ceil(t / 64);
  const double flops = 2 * t * params + 4 * t * l * A;  // q.k and the weighted sum of v
  const double bytes = params * static_cast<double>(dtype_bytes(weights)) * tiles +
                       t * l * A * 2 * sizeof(float);
  return flops / rates.flops_per_s + bytes / rates.bytes_per_s;
}

double head_seconds(const Config& c, uint32_t rows, DType weights, const SubmissionRates& rates) {
  const double CV = double(c.n_embd) * c.n_vocab;
  return 2 * rows * CV / rates.flops_per_s +
         CV * static_cast<double>(dtype_bytes(weights)) * std::ceil(rows / 64.0) / rates.bytes_per_s;
}

double observed_speed(double nominal_s, double wall_s) {
  if (!(nominal_s > 0) || !(wall_s > 0)) return 1;
  return std::clamp(nominal_s / wall_s, 1.0, kMaxSpeed);
}

SubmissionRates calibrated(const SubmissionRates& nominal, double speed) {
  const double f = std::max(1.0, std::min(speed, kMaxSpeed) / kSpeedMargin);
  SubmissionRates r = nominal;
  r.flops_per_s *= f;
  r.bytes_per_s *= f;
  return r;
}

double submission_timeout(double expected_s, double base_s) {
  return std::max(base_s, kTimeoutMargin * expected_s);
}

uint32_t blocks_per_submission(const Config& c, uint32_t T, uint32_t L, DType weights,
                               const SubmissionRates& rates) {
  const double each = block_seconds(c, T, L, weights, rates);
  if (each * c.n_layer <= rates.budget_s) return c.n_layer;
  return static_cast<uint32_t>(std::clamp<double>(std::floor(rates.budget_s / each), 1, c.n_layer));
}

std::vector<uint32_t> prompt_chunks(const Config& c, uint32_t T, uint32_t pos, DType weights,
                                    const SubmissionRates& rates, bool all_rows) {
  auto fits = [&](uint32_t t, uint32_t at) {
    return block_seconds(c, t, at + t, weights, rates) <= rates.budget_s &&
           (!all_rows || head_seconds(c, t, weights, rates) <= rates.budget_s);
  };
  if (!c.causal || T <= 1 || fits(T, pos)) return {T};
  std::vector<uint32_t> chunks;
  for (uint32_t done = 0; done < T;) {
    const uint32_t left = T - done, at = pos + done;
    // The cost grows with t: the most that fits, by bisection in [1, left].
    uint32_t lo = 1, hi = left;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid, at))
        lo = mid;
      else
        hi = mid - 1;
    }
    if (lo < left && lo >= 64) lo -= lo % 64;
    chunks.push_back(lo);
    done += lo;
  }
  return chunks;
}

}  // namespace model
