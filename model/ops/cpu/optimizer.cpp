#include "model/ops/cpu/optimizer.h"

#include <cmath>

#include "model/ops/cpu/common.h"

namespace model::cpu {

double grad_sum_squares(const float* g, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += wide(g[i]) * wide(g[i]);
  return s;
}

void adamw(float* p, float* m, float* v, const float* g, size_t n, const AdamW& o, uint64_t step,
           float grad_scale) {
  const double b1 = wide(o.beta1), b2 = wide(o.beta2), lr = wide(o.lr);
  const double c1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double c2 = 1.0 - std::pow(b2, static_cast<double>(step));
  for (size_t i = 0; i < n; i++) {
    const double gi = wide(g[i]) * wide(grad_scale);
    const double mi = b1 * wide(m[i]) + (1.0 - b1) * gi;
    const double vi = b2 * wide(v[i]) + (1.0 - b2) * gi * gi;
    const double pi = wide(p[i]) * (1.0 - lr * wide(o.weight_decay));
    p[i] = narrow(pi - lr * (mi / c1) / (std::sqrt(vi / c2) + wide(o.eps)));
    m[i] = narrow(mi);
    v[i] = narrow(vi);
  }
}

void sgd(float* p, const float* g, size_t n, float lr, float weight_decay, float grad_scale) {
  for (size_t i = 0; i < n; i++)
    p[i] = narrow(wide(p[i]) * (1.0 - wide(lr) * wide(weight_decay)) - wide(lr) * wide(grad_scale) * wide(g[i]));
}

}  // namespace model::cpu
