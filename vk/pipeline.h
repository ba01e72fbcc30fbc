// Compute pipelines built from embedded SPIR-V. A shader's interface (bindings, push-constant
// size) comes from the module itself (vk/reflect.h). Specialization constant ids 0, 1, 2 are the
// workgroup size (`layout(local_size_x_id = 0, ...)`); ids from 3 up are the shader's own.
#pragma once
#include <volk.h>

#include <array>
#include <functional>
#include <span>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "vk/check.h"
#include "vk/handle.h"
#include "vk/pipeline_cache.h"
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
  // cache: VK_NULL_HANDLE or the cache the driver may take the compiled pipeline from.
  // compile_now false: only the layouts are made; compile() makes the pipeline itself.
  Pipeline(const Device& device, const std::string& name, const Specialization& spec,
           VkPipelineCache cache = VK_NULL_HANDLE, bool compile_now = true);

  // vkCreateComputePipelines, where most drivers compile; once. Pipelines may be compiled on
  // different threads at once (each touches only itself and the internally synchronized cache).
  void compile(VkPipelineCache cache);
  bool compiled() const { return static_cast<bool>(pipeline_); }

  const std::string& name() const { return name_; }
  const ShaderInterface& interface() const { return interface_; }
  const std::array<uint32_t, 3>& local_size() const { return spec_.local_size; }
  VkPipeline get() const {  // throws before compile()
    if (!pipeline_) throw Error("pipeline '" + name_ + "' used before it was compiled");
    return pipeline_;
  }
  VkPipelineLayout layout() const { return layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }

 private:
  const Device* device_ = nullptr;
  std::span<const uint32_t> spirv_;  // the embedded module (static storage)
  std::string name_;
  Specialization spec_;
  ShaderInterface interface_;
  Handle<VkDescriptorSetLayout> set_layout_;
  Handle<VkPipelineLayout> layout_;
  Handle<VkPipeline> pipeline_;
};

// Called as deferred pipelines compile: done of total.
using CompileProgress = std::function<void(size_t done, size_t total)>;

// Every pipeline the engine uses, created on first request and kept for the device's lifetime,
// through a pipeline cache that is kept in `cache_dir` between runs (none when it is "").
//
// Compiling before the first pass: with defer(true), get() makes a pipeline's layouts but not
// the pipeline, and a dry recording of the passes to come (Recorder::begin_dry) then names
// exactly the pipelines they use; compile_deferred() compiles those on a thread pool.
class Kernels {
 public:
  explicit Kernels(const Device& device, const std::filesystem::path& cache_dir = {});
  ~Kernels();  // saves the pipeline cache (a failure is a warning)
  const Device& device() const { return device_; }
  const Pipeline& get(const std::string& name, const Specialization& spec = {});

  void defer(bool on) { deferring_ = on; }
  // Compiles what get() deferred, in parallel, then saves the pipeline cache; returns how many.
  // `progress` is called from the compiling threads, one call at a time, with done rising by
  // one each call. The first failure (of a compile or of progress) is rethrown once every
  // thread has stopped.
  size_t compile_deferred(const CompileProgress& progress = {});
  // Pipelines made so far.
  size_t count() const { return pipelines_.size(); }

 private:
  const Device& device_;
  PipelineCache cache_;
  std::map<std::pair<std::string, Specialization>, std::unique_ptr<Pipeline>> pipelines_;
  bool deferring_ = false;
  std::vector<Pipeline*> deferred_;
};

}  // namespace vk
