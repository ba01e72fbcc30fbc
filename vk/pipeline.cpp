#include "vk/pipeline.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include "vk/check.h"
#include "vk/context.h"
#include "vk/spirv_registry.h"

namespace vk {

Pipeline::Pipeline(const Device& device, const std::string& name, const Specialization& spec,
                   VkPipelineCache cache, bool compile_now)
    : name_(name), spec_(spec) {
  std::span<const uint32_t> spirv = find_spirv(name);
  if (spirv.empty()) throw Error("no embedded shader named '" + name + "'");
  interface_ = reflect(spirv);

  const DeviceCaps& caps = device.caps();
  uint64_t invocations = 1;
  for (size_t i = 0; i < 3; i++) {
    if (spec.local_size[i] == 0 || spec.local_size[i] > caps.max_workgroup_size[i])
      throw Error("shader '" + name + "': workgroup dimension " + std::to_string(i) + " = " +
                  std::to_string(spec.local_size[i]) + " is outside this device's limit " +
                  std::to_string(caps.max_workgroup_size[i]));
    invocations *= spec.local_size[i];
  }
  if (invocations > caps.max_workgroup_invocations)
    throw Error("shader '" + name + "': " + std::to_string(invocations) +
                " invocations per workgroup, over this device's limit " +
                std::to_string(caps.max_workgroup_invocations));
  if (interface_.push_constant_bytes > caps.max_push_constants)
    throw Error("shader '" + name + "': " + std::to_string(interface_.push_constant_bytes) +
                " bytes of push constants, over this device's maxPushConstantsSize " +
                std::to_string(caps.max_push_constants));

  VkDevice dev = device.get();
  std::vector<VkDescriptorSetLayoutBinding> bindings;
  for (const BindingInfo& b : interface_.bindings)
    bindings.push_back({b.binding, b.type, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr});
  VkDescriptorSetLayoutCreateInfo set_info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  set_info.bindingCount = static_cast<uint32_t>(bindings.size());
  set_info.pBindings = bindings.data();
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VK_CHECK(vkCreateDescriptorSetLayout(dev, &set_info, nullptr, &set_layout));
  set_layout_ = device.own(set_layout, vkDestroyDescriptorSetLayout);

  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, interface_.push_constant_bytes};
  VkPipelineLayoutCreateInfo layout_info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &set_layout;
  layout_info.pushConstantRangeCount = range.size ? 1 : 0;
  layout_info.pPushConstantRanges = &range;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VK_CHECK(vkCreatePipelineLayout(dev, &layout_info, nullptr, &layout));
  layout_ = device.own(layout, vkDestroyPipelineLayout);

  device_ = &device;
  spirv_ = spirv;
  if (compile_now) compile(cache);
}

void Pipeline::compile(VkPipelineCache cache) {
  if (pipeline_) return;
  const Device& device = *device_;
  const VkDevice dev = device.get();
  const Specialization& spec = spec_;
  VkShaderModuleCreateInfo module_info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  module_info.codeSize = spirv_.size_bytes();
  module_info.pCode = spirv_.data();
  VkShaderModule module_handle = VK_NULL_HANDLE;
  VK_CHECK(vkCreateShaderModule(dev, &module_info, nullptr, &module_handle));
  Handle<VkShaderModule> module = device.own(module_handle, vkDestroyShaderModule);

  std::vector<uint32_t> values(spec.local_size.begin(), spec.local_size.end());
  values.insert(values.end(), spec.constants.begin(), spec.constants.end());
  std::vector<VkSpecializationMapEntry> entries;
  for (uint32_t i = 0; i < values.size(); i++)
    entries.push_back({i, i * 4u, sizeof(uint32_t)});
  VkSpecializationInfo spec_info{static_cast<uint32_t>(entries.size()), entries.data(),
                                 values.size() * sizeof(uint32_t), values.data()};

  VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  info.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module;
  info.stage.pName = "main";
  info.stage.pSpecializationInfo = &spec_info;
  info.layout = layout_;
  VkPipeline pipeline = VK_NULL_HANDLE;
  VK_CHECK(vkCreateComputePipelines(dev, cache, 1, &info, nullptr, &pipeline));
  pipeline_ = device.own(pipeline, vkDestroyPipeline);
}

Kernels::Kernels(const Device& device, const std::filesystem::path& cache_dir)
    : device_(device), cache_(device, cache_dir) {}

Kernels::~Kernels() {
  try {
    cache_.save();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2vk: warning: the pipeline cache was not saved: %s\n", e.what());
  }
}

const Pipeline& Kernels::get(const std::string& name, const Specialization& spec) {
  auto key = std::make_pair(name, spec);
  auto it = pipelines_.find(key);
  if (it == pipelines_.end()) {
    it = pipelines_
             .emplace(key, std::make_unique<Pipeline>(device_, name, spec, cache_.get(), false))
             .first;
    if (deferring_) deferred_.push_back(it->second.get());
  }
  Pipeline& p = *it->second;
  if (!deferring_) p.compile(cache_.get());  // once: a no-op when compiled
  return p;
}

size_t Kernels::compile_deferred(const CompileProgress& progress) {
  std::vector<Pipeline*> todo;
  for (Pipeline* p : deferred_)
    if (!p->compiled()) todo.push_back(p);
  deferred_.clear();
  if (todo.empty()) return 0;
  // Drivers compile at vkCreateComputePipelines (most GPU drivers) and take the pipeline cache
  // from any thread; each pipeline is its own object, so the threads share nothing else.
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  std::atomic<size_t> next{0};
  std::mutex mutex;  // guards done, failed and the progress calls (in order, one at a time)
  size_t done = 0;
  std::exception_ptr failed;
  auto work = [&] {
    for (size_t i; (i = next++) < todo.size();) {
      std::exception_ptr error;
      try {
        todo[i]->compile(cache_.get());
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (error && !failed) failed = error;
      ++done;
      try {
        if (progress) progress(done, todo.size());
      } catch (...) {
        if (!failed) failed = std::current_exception();
      }
    }
  };
  {
    std::vector<std::thread> pool;
    try {
      for (size_t t = 1; t < std::min(threads, todo.size()); t++) pool.emplace_back(work);
    } catch (const std::system_error&) {
      // No more threads to be had: the ones started, and this one, do the rest.
    }
    work();
    for (std::thread& t : pool) t.join();
  }
  if (failed) std::rethrow_exception(failed);
  // Saved now as well as at exit: a run stopped by Ctrl-C (no destructors) keeps what it compiled.
  cache_.save();
  return todo.size();
}

}  // namespace vk
