#include "model/ops/gpu/ops.h"

#include <utility>

namespace model::gpu {

Ops::Ops(const vk::Device& device) : Ops(device.kernels()) {}

Ops::Ops(vk::Kernels& kernels)
    : Ops(kernels, choose_policy(kernels.device().caps(), kernels.device().kernels_asked(),
                                 kernels.device().coop_matrix_asked())) {}

Ops::Ops(vk::Kernels& kernels, const KernelPolicy& policy, std::string note)
    : kernels_(kernels), policy_(policy), note_(std::move(note)) {}

}  // namespace model::gpu
