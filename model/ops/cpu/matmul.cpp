#include "model/ops/cpu/matmul.h"

#include <algorithm>
#include <vector>

namespace model::cpu {

void matmul(float* out, const float* x, const float* w, const float* bias, const float* residual,
            size_t T, size_t K, size_t N, model::WeightLayout layout, model::Activation act) {
  std::vector<double> acc(N);
  for (size_t t = 0; t < T; t++) {
    const float* xt = x + t * K;
    if (layout == model::WeightLayout::KN) {
      // Row by row of W [K, N], so the weight is read in memory order.
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t k = 0; k < K; k++) {
        const double xk = xt[k];
        const float* wk = w + k * N;
        for (size_t n = 0; n < N; n++) acc[n] += xk * static_cast<double>(wk[n]);
      }
    } else {
      for (size_t n = 0; n < N; n++) {
        const float* wn = w + n * K;
        double s = 0;
        for (size_t k = 0; k < K; k++) s += static_cast<double>(xt[k]) * static_cast<double>(wn[k]);
        acc[n] = s;
      }
    }
    for (size_t n = 0; n < N; n++) {
      double v = acc[n] + (bias ? static_cast<double>(bias[n]) : 0.0);
      v = activate(v, act);
      if (residual) v += static_cast<double>(residual[t * N + n]);  // read before out is written
      out[t * N + n] = static_cast<float>(v);
    }
  }
}

}  // namespace model::cpu
