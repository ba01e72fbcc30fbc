#include "model/ops/cpu/layernorm.h"

#include <cmath>
#include <vector>

#include "model/ops/cpu/common.h"

namespace model::cpu {

void layernorm(float* out, const float* x, const float* gamma, const float* beta, size_t T,
               size_t C, float eps, model::LayerNormKind kind) {
  const auto n = static_cast<double>(C);
  const auto e = static_cast<double>(eps);
  std::vector<double> d(C);
  for (size_t t = 0; t < T; t++) {
    double sum = 0;
    for (size_t c = 0; c < C; c++) sum += static_cast<double>(x[t * C + c]);
    const bool rms = kind == model::LayerNormKind::Rms;
    const double mean = rms ? 0.0 : sum / n;  // Rms: no mean subtracted
    double m2 = 0;  // sum of squared deviations (Rms: of squares)
    for (size_t c = 0; c < C; c++) {
      d[c] = static_cast<double>(x[t * C + c]) - mean;
      m2 += d[c] * d[c];
    }
    const double scale = kind == model::LayerNormKind::StdPlusEps
                             ? 1.0 / (std::sqrt(m2 / (n - 1.0)) + e)
                             : 1.0 / std::sqrt(m2 / n + e);
    for (size_t c = 0; c < C; c++)
      out[t * C + c] = static_cast<float>(d[c] * scale * static_cast<double>(gamma[c]) +
                                          (rms ? 0.0 : static_cast<double>(beta[c])));
  }
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dout, const float* x,
                        const float* gamma, size_t T, size_t C, float eps,
                        model::LayerNormKind kind) {
  const auto n = static_cast<double>(C);
  std::vector<double> dev(C), g(C), dgs(C, 0.0), dbs(C, 0.0);
  const bool rms = kind == model::LayerNormKind::Rms;
  for (size_t t = 0; t < T; t++) {
    const float* xr = x + t * C;
    const float* dy = dout + t * C;
    double sum = 0;
    for (size_t c = 0; c < C; c++) sum += wide(xr[c]);
    const double mean = rms ? 0.0 : sum / n;
    double m2 = 0;
    for (size_t c = 0; c < C; c++) {
      dev[c] = wide(xr[c]) - mean;
      m2 += dev[c] * dev[c];
    }
    // Standard's formula with dev = x for Rms (mean 0, no beta): its a is 1 / sqrt(mean(x^2) + eps)
    const bool standard = kind != model::LayerNormKind::StdPlusEps;
    const double s = standard ? 0.0 : std::sqrt(m2 / (n - 1.0));
    // y = dev * a * gamma + beta, a = 1 / sqrt(var + eps) or 1 / (s + eps)
    const double a = standard ? 1.0 / std::sqrt(m2 / n + wide(eps)) : 1.0 / (s + wide(eps));
    double g_mean = 0, g_dev = 0;  // mean of g; sum of g * dev
    for (size_t c = 0; c < C; c++) {
      g[c] = wide(dy[c]) * wide(gamma[c]);
      g_mean += g[c];
      g_dev += g[c] * dev[c];
      dgs[c] += wide(dy[c]) * dev[c] * a;
      dbs[c] += wide(dy[c]);
    }
    g_mean = rms ? 0.0 : g_mean / n;  // Rms subtracts no mean, so g has no mean's share
    // d a / d x_j: -a^3 dev_j / n (standard); -a^2 dev_j / ((n - 1) s) (std + eps; 0 at s = 0)
    const double da = standard ? -a * a * a / n : s > 0 ? -a * a / ((n - 1.0) * s) : 0.0;
    for (size_t c = 0; c < C; c++) dx[t * C + c] = narrow(a * (g[c] - g_mean) + g_dev * da * dev[c]);
  }
  for (size_t c = 0; c < C; c++) {
    dgamma[c] = narrow(wide(dgamma[c]) + dgs[c]);
    if (!rms) dbeta[c] = narrow(wide(dbeta[c]) + dbs[c]);
  }
}

}  // namespace model::cpu
