#include "model/ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace model::cpu {

void attention(float* out, const float* q, size_t q_stride, const float* k_cache,
               const float* v_cache, size_t T, size_t L, size_t C, size_t H,
               const AttentionSpec& options, float* probs) {
  const size_t D = C / H;
  const double scale =
      options.scale != 0 ? double{options.scale} : 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> w(L), acc(D);
  for (size_t t = 0; t < T; t++) {
    const size_t n = options.causal ? L - T + t + 1 : L;  // visible keys
    for (size_t h = 0; h < H; h++) {
      const float* qh = q + t * q_stride + h * D;
      double m = -INFINITY;
      for (size_t j = 0; j < n; j++) {
        const float* kh = k_cache + j * C + h * D;
        double s = 0;
        for (size_t d = 0; d < D; d++) s += double{qh[d]} * double{kh[d]};
        w[j] = s * scale;
        m = std::max(m, w[j]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < n; j++) {
        const double e = std::exp(w[j] - m);
        const float* vh = v_cache + j * C + h * D;
        sum += e;
        for (size_t d = 0; d < D; d++) acc[d] += e * double{vh[d]};
      }
      for (size_t d = 0; d < D; d++) out[t * C + h * D + d] = static_cast<float>(acc[d] / sum);
      if (probs) {
        float* row = probs + (h * T + t) * L;
        for (size_t j = 0; j < L; j++)
          row[j] = j < n ? static_cast<float>(std::exp(w[j] - m) / sum) : 0.0f;
      }
    }
  }
}

}  // namespace model::cpu
