#include "model/cpu/activation.h"

#include "model/cpu/common.h"

namespace cpu {

void activation(float* out, const float* x, size_t n, gpu::Activation kind) {
  for (size_t i = 0; i < n; i++) out[i] = static_cast<float>(activate(x[i], kind));
}

}  // namespace cpu
