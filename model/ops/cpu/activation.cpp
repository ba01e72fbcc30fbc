#include "model/ops/cpu/activation.h"



#include "model/ops/cpu/common.h"

namespace model::cpu {

void activation(float* out, const float* x, size_t n, model::Activation kind) {
  for (size_t i = 0; i < n; i++) out[i] = static_cast<float>(activate(x[i], kind));
}

void activation_backward(float* dx, const float* dout, const float* x, size_t n,
                         model::Activation kind) {
  for (size_t i = 0; i < n; i++) dx[i] = narrow(wide(dout[i]) * activation_slope(wide(x[i]), kind));
}

}  // namespace model::cpu
