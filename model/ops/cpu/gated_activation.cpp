#include "model/ops/cpu/gated_activation.h"

#include "model/ops/cpu/common.h"

namespace model::cpu {

void gated_activation(float* out, const float* in, size_t T, size_t F, model::Activation act) {
  for (size_t t = 0; t < T; t++) {
    const float* row = in + t * 2 * F;
    for (size_t f = 0; f < F; f++)
      out[t * F + f] = narrow(activate(wide(row[f]), act) * wide(row[F + f]));
  }
}

}  // namespace model::cpu
