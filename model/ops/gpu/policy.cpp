#include "model/ops/gpu/policy.h"

namespace model::gpu {

KernelPolicy choose_policy(const vk::DeviceCaps& caps, vk::KernelSet asked) {
  KernelPolicy p;
  if (asked == vk::KernelSet::Auto) {
    const bool cpu = caps.type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    p.set = cpu ? vk::KernelSet::Cpu : vk::KernelSet::Gpu;
    p.why = std::string("auto: ") + (cpu ? "a CPU device" : "not a CPU device");
  } else {
    p.set = asked;
    p.why = "forced (--kernels or GPT2VK_KERNELS)";
  }
  if (p.set == vk::KernelSet::Cpu) {
    // llvmpipe runs a storage-buffer load that differs per lane as a scalar loop, a texel load
    // as one gather, and a workgroup barrier as a coroutine switch.
    p.texel_matmul = p.texel_attention = p.texel_layernorm = true;
    p.interleaved_weights = true;
    p.norm_linear_max_bytes = uint64_t{1} << 20;
    // 64 logits per invocation: few workgroups, two levels for a vocabulary. GPUs keep many
    // small workgroups, which they fill themselves with.
    p.topk_per_invocation = 64;
  } else {
    p.nk_weights = true;
    p.split_attention = true;
  }
  return p;
}

KernelPolicy kernel_policy(const vk::Device& device) {
  return choose_policy(device.caps(), device.kernels_asked());
}

std::string KernelPolicy::describe() const {
  return std::string(vk::kernel_set_name(set)) + " (" + why + ")";
}

}  // namespace model::gpu
