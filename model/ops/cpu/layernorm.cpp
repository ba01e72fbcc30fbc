#include "model/ops/cpu/layernorm.h"

#include <cmath>
#include <vector>

namespace model::cpu {

void layernorm(float* out, const float* x, const float* gamma, const float* beta, size_t T,
               size_t C, float eps, model::LayerNormKind kind) {
  const auto n = static_cast<double>(C);
  const auto e = static_cast<double>(eps);
  std::vector<double> d(C);
  for (size_t t = 0; t < T; t++) {
    double sum = 0;
    for (size_t c = 0; c < C; c++) sum += static_cast<double>(x[t * C + c]);
    const double mean = sum / n;
    double m2 = 0;  // sum of squared deviations
    for (size_t c = 0; c < C; c++) {
      d[c] = static_cast<double>(x[t * C + c]) - mean;
      m2 += d[c] * d[c];
    }
    const double scale = kind == model::LayerNormKind::Standard
                             ? 1.0 / std::sqrt(m2 / n + e)
                             : 1.0 / (std::sqrt(m2 / (n - 1.0)) + e);
    for (size_t c = 0; c < C; c++)
      out[t * C + c] = static_cast<float>(d[c] * scale * static_cast<double>(gamma[c]) +
                                          static_cast<double>(beta[c]));
  }
}

}  // namespace model::cpu
