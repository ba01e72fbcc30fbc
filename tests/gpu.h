// The GPU every test shares: one instance with the Khronos validation layer and synchronization
// validation, one device, one pipeline cache. A test takes it with GPU_TEST(g); the scope fails
// the test if the validation layer reported anything while it ran.
#pragma once
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include <span>
#include <vector>

#include "vk/context.h"
#include "vk/memory.h"
#include "vk/pipeline.h"

namespace test {

struct Gpu {
  vkr::Instance instance;
  vkr::Device device;
  vkr::Kernels kernels;
  explicit Gpu(const vkr::InstanceOptions& options);
};

// The shared GPU, or nullptr after reporting why: a skip locally, a failure when CI=true.
Gpu* gpu();

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
  vkr::Device device;
  vkr::Kernels kernels;
  LoweredGpu(Gpu& g, const vkr::LimitOverrides& limits);
};

// maxComputeWorkGroupCount[0] when at most `cheap` (a test can exceed it in reasonable time);
// otherwise 0, after a SKIPPED message.
uint32_t group_count_limit_x(Gpu& g, uint32_t cheap);

// Copies host floats into a new span of `arena`, and device floats back; on the shared device
// or on another one (a LoweredGpu's).
vkr::BufferSpan to_gpu(const vkr::Device& device, vkr::Arena& arena, std::span<const float> data);
std::vector<float> from_gpu(const vkr::Device& device, const vkr::BufferSpan& span, size_t count);
vkr::BufferSpan to_gpu(Gpu& g, vkr::Arena& arena, std::span<const float> data);
std::vector<float> from_gpu(Gpu& g, const vkr::BufferSpan& span, size_t count);

}  // namespace test

#define GPU_TEST(g)                       \
  test::Gpu* g##_ptr_ = test::gpu();      \
  if (!g##_ptr_) return;                  \
  test::Gpu& g = *g##_ptr_;               \
  test::ValidationScope g##_validation_(g)
