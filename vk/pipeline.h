// Compute pipelines built from embedded SPIR-V. A shader's interface (bindings, push-constant
// size) comes from the module itself (vk/reflect.h). Specialization constant ids 0, 1, 2 are the
// workgroup size (`layout(local_size_x_id = 0, ...)`); ids from 3 up are the shader's own.
#pragma once
#include <volk.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "vk/handle.h"
#include "vk/reflect.h"

namespace vk {

class Device;

struct Specialization {
  std::array<uint32_t, 3> local_size = {64, 1, 1};
  std::vector<uint32_t> constants;  // values for constant_id 3, 4, ...

  bool operator<(const Specialization& o) const {
    return std::tie(local_size, constants) < std::tie(o.local_size, o.constants);
  }
};

class Pipeline {
 public:
  // Throws vk::Error when the shader is unknown, its workgroup exceeds the device's limits or
  // its push constants exceed maxPushConstantsSize.
  Pipeline(const Device& device, const std::string& name, const Specialization& spec);

  const std::string& name() const { return name_; }
  const ShaderInterface& interface() const { return interface_; }
  const std::array<uint32_t, 3>& local_size() const { return spec_.local_size; }
  VkPipeline get() const { return pipeline_; }
  VkPipelineLayout layout() const { return layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }

 private:
  std::string name_;
  Specialization spec_;
  ShaderInterface interface_;
  Handle<VkDescriptorSetLayout> set_layout_;
  Handle<VkPipelineLayout> layout_;
  Handle<VkPipeline> pipeline_;
};

// Every pipeline the engine uses, created on first request and kept for the device's lifetime.
class Kernels {
 public:
  explicit Kernels(const Device& device) : device_(device) {}
  const Device& device() const { return device_; }
  const Pipeline& get(const std::string& name, const Specialization& spec = {});

 private:
  const Device& device_;
  std::map<std::pair<std::string, Specialization>, std::unique_ptr<Pipeline>> pipelines_;
};

}  // namespace vk
