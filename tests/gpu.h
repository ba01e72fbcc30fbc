// The GPU every test shares: one instance with the Khronos validation layer and synchronization
// validation, one device, one pipeline cache. A test takes it with GPU_TEST(g); the scope fails
// the test if the validation layer reported anything while it ran.
#pragma once
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>

#include <span>
#include <vector>

#include "model/ops/gpu/ops.h"
#include "model/ops/types.h"
#include "vk/context.h"
#include "vk/memory.h"
#include "vk/pipeline.h"

namespace test {

// The kernel sets every whole-model test runs, both on whatever device the tests have: what GPUs
// get, and what CPU Vulkan devices get (model/ops/gpu/policy.h).
inline constexpr vk::KernelSet kKernelSets[] = {vk::KernelSet::Gpu, vk::KernelSet::Cpu};

struct Gpu {
  vk::Instance instance;
  vk::Device device;  // the kernel set its type calls for (or GPT2VK_KERNELS)
  vk::Kernels pipelines;  // its own, so a test can count what it compiles
  model::gpu::Ops kernels;  // the pipelines with the device's kernel policy decided
  explicit Gpu(const vk::InstanceOptions& options);
  // A device on the same physical device that runs `set`, created on first use and kept.
  const vk::Device& with_kernels(vk::KernelSet set);

 private:
  std::map<vk::KernelSet, std::unique_ptr<vk::Device>> forced_;
};

// The shared GPU, or nullptr after reporting why: a skip locally, a failure when CI=true.
Gpu* gpu();
// Destroys the shared GPU (tests/main.cpp, after the last test): its devices go while the
// validation layer's own state still exists, not among the exit handlers after it.
void release_gpu();

// Whether the tests' devices run prompts on the matrix units: only with GPT2VK_COOP_MATRIX=on.
bool coop_matrix();

// Fails the current test if validation messages arrived during its lifetime, except the ones
// a test provoked on purpose and accounted for with expect().
class ValidationScope {
 public:
  explicit ValidationScope(Gpu& g);
  ~ValidationScope();
  uint32_t seen() const;  // messages since the scope began
  void expect(uint32_t n) { expected_ += n; }

 private:
  Gpu& g_;
  uint32_t start_;
  uint32_t expected_ = 0;
};

// A second device on the shared GPU's physical device with some limits lowered (zero keeps the
// device's own), so that small tests take the paths of huge tensors and small GPUs. It shares
// the instance, so GPU_TEST's validation scope covers it too.
struct LoweredGpu {
  vk::Device device;
  vk::Kernels pipelines;
  model::gpu::Ops kernels;
  // kernels: the kernel set the device runs (Auto: by its type).
  LoweredGpu(Gpu& g, const vk::LimitOverrides& limits,
             vk::KernelSet kernels = vk::KernelSet::Auto);
};

// maxComputeWorkGroupCount[0] when at most `cheap` (a test can exceed it in reasonable time);
// otherwise 0, after a SKIPPED message.
uint32_t group_count_limit_x(Gpu& g, uint32_t cheap);

// Copies host floats into a new span of `arena`, and device floats back; on the shared device
// or on another one (a LoweredGpu's).
vk::BufferSpan to_gpu(const vk::Device& device, vk::Arena& arena, std::span<const float> data);
std::vector<float> from_gpu(const vk::Device& device, const vk::BufferSpan& span, size_t count);
vk::BufferSpan to_gpu(Gpu& g, vk::Arena& arena, std::span<const float> data);
std::vector<float> from_gpu(Gpu& g, const vk::BufferSpan& span, size_t count);
// The same as elements of `dtype` (an fp16 KV cache): for F16 each float rounded to the
// nearest half on the way up, halves widened on the way back.
vk::BufferSpan to_gpu(const vk::Device& device, vk::Arena& arena, std::span<const float> data,
                      model::DType dtype);
std::vector<float> from_gpu(const vk::Device& device, const vk::BufferSpan& span, size_t count,
                            model::DType dtype);

}  // namespace test

#define GPU_TEST(g)                       \
  test::Gpu* g##_ptr_ = test::gpu();      \
  if (!g##_ptr_) return;                  \
  test::Gpu& g = *g##_ptr_;               \
  test::ValidationScope g##_validation_(g)
