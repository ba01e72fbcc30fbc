// Just enough SPIR-V reflection to build a compute pipeline from the module alone: its
// descriptor bindings (type, read or written), and its push-constant block size. The shader is
// the one declaration of its interface; nothing on the host repeats it.
#pragma once
#include <volk.h>

#include <cstdint>
#include <span>
#include <vector>

namespace vk {

struct BindingInfo {
  uint32_t binding = 0;
  VkDescriptorType type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
  bool reads = true;   // not `writeonly`
  bool writes = true;  // not `readonly`
  // Texel buffers: the view format the shader declares (rgba32ui, rgba32f); else UNDEFINED.
  VkFormat format = VK_FORMAT_UNDEFINED;
};

struct ShaderInterface {
  std::vector<BindingInfo> bindings;  // sorted by binding, set 0 only
  uint32_t push_constant_bytes = 0;
};

// Throws vk::Error when the module is malformed or uses a descriptor set other than 0.
ShaderInterface reflect(std::span<const uint32_t> spirv);

}  // namespace vk
