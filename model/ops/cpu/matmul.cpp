#include "model/ops/cpu/matmul.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "model/ops/cpu/common.h"

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

void matmul_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                     const float* w, size_t T, size_t K, size_t N, model::WeightLayout layout) {
  if (layout != model::WeightLayout::KN && layout != model::WeightLayout::NK)
    throw std::invalid_argument("matmul_backward: the weight must be in the KN or NK layout");
  const bool kn = layout == model::WeightLayout::KN;
  const auto at = [&](size_t k, size_t n) { return kn ? k * N + n : n * K + k; };
  for (size_t t = 0; t < T; t++)
    for (size_t k = 0; k < K; k++) {
      double s = 0;
      for (size_t n = 0; n < N; n++) s += wide(dout[t * N + n]) * wide(w[at(k, n)]);
      dx[t * K + k] = narrow(s);
    }
  for (size_t k = 0; k < K; k++)
    for (size_t n = 0; n < N; n++) {
      double s = 0;
      for (size_t t = 0; t < T; t++) s += wide(x[t * K + k]) * wide(dout[t * N + n]);
      dw[at(k, n)] = narrow(wide(dw[at(k, n)]) + s);
    }
  if (!dbias) return;
  for (size_t n = 0; n < N; n++) {
    double s = 0;
    for (size_t t = 0; t < T; t++) s += wide(dout[t * N + n]);
    dbias[n] = narrow(wide(dbias[n]) + s);
  }
}

}  // namespace model::cpu
