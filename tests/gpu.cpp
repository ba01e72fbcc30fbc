#include "tests/gpu.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "model/formats/dtype.h"
#include "model/ops/gpu/common.h"
#include "tests/ci.h"

namespace test {
namespace {

vk::DeviceOptions device_options() {
  vk::DeviceOptions o;
  if (const char* sel = std::getenv("GPT2VK_TEST_DEVICE")) o.select = sel;  // index or name
  o.coop_matrix = coop_matrix();
  return o;
}

}  // namespace

// Whole models are checked at fp32's tolerances, and the matrix units (on by default where the
// tuning table says, NVIDIA) round x to fp16: the tests' devices keep them off unless
// GPT2VK_COOP_MATRIX=on, and main() sets it to off for the gpt2vk processes the tests start.
// Their own tests ask for them explicitly (test_matmul: MatmulKernel::Coop).
bool coop_matrix() {
  const char* v = std::getenv("GPT2VK_COOP_MATRIX");
  return v && std::strcmp(v, "on") == 0;
}

Gpu::Gpu(const vk::InstanceOptions& options)
    : instance(options), device(instance, device_options()), pipelines(device), kernels(pipelines) {}

namespace {
std::unique_ptr<Gpu> shared;
std::string failure;
bool tried = false;
}  // namespace

void release_gpu() { shared.reset(); }

Gpu* gpu() {
  if (!tried) {
    tried = true;
    try {
      vk::InstanceOptions options;
      options.validation = true;
      options.require_validation = true;
      shared = std::make_unique<Gpu>(options);
      MESSAGE("GPU tests run on '" << shared->device.caps().name
                                   << "' with validation and synchronization validation");
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (shared) return shared.get();
  if (in_ci()) {
    FAIL("no Vulkan device for GPU tests (CI=true makes this a failure): " << failure);
  } else {
    MESSAGE("SKIPPED: no Vulkan device for GPU tests: " << failure);
  }
  return nullptr;
}

const vk::Device& Gpu::with_kernels(vk::KernelSet set) {
  std::unique_ptr<vk::Device>& d = forced_[set];
  if (!d) {
    vk::DeviceOptions o = device_options();
    o.select = std::to_string(device.index());
    o.kernels = set;
    d = std::make_unique<vk::Device>(instance, o);
  }
  return *d;
}

ValidationScope::ValidationScope(Gpu& g) : g_(g), start_(g.instance.log().messages) {}

uint32_t ValidationScope::seen() const { return g_.instance.log().messages - start_; }

ValidationScope::~ValidationScope() {
  CHECK_MESSAGE(seen() == expected_, "the Vulkan validation layer reported " << seen()
                                                                           << " message(s) (see stderr)");
}

namespace {
vk::DeviceOptions lowered_options(Gpu& g, const vk::LimitOverrides& limits, vk::KernelSet set) {
  vk::DeviceOptions o = device_options();
  o.select = std::to_string(g.device.index());
  o.overrides = limits;
  o.kernels = set;
  return o;
}
}  // namespace

LoweredGpu::LoweredGpu(Gpu& g, const vk::LimitOverrides& limits, vk::KernelSet set)
    : device(g.instance, lowered_options(g, limits, set)), pipelines(device), kernels(pipelines) {}

uint32_t group_count_limit_x(Gpu& g, uint32_t cheap) {
  const uint32_t limit = g.device.caps().max_workgroup_count[0];
  if (limit <= cheap) return limit;
  MESSAGE("SKIPPED: maxComputeWorkGroupCount[0] = " << limit << " is too large to exceed cheaply");
  return 0;
}

vk::BufferSpan to_gpu(const vk::Device& device, vk::Arena& arena, std::span<const float> data) {
  vk::BufferSpan s = arena.alloc(data.size_bytes());
  vk::upload(device, s, data.data(), data.size_bytes());
  return s;
}

std::vector<float> from_gpu(const vk::Device& device, const vk::BufferSpan& span, size_t count) {
  std::vector<float> v(count);
  vk::download(device, v.data(), span, count * sizeof(float));
  return v;
}

vk::BufferSpan to_gpu(Gpu& g, vk::Arena& arena, std::span<const float> data) {
  return to_gpu(g.device, arena, data);
}

std::vector<float> from_gpu(Gpu& g, const vk::BufferSpan& span, size_t count) {
  return from_gpu(g.device, span, count);
}

vk::BufferSpan to_gpu(const vk::Device& device, vk::Arena& arena, std::span<const float> data,
                      model::DType dtype) {
  if (dtype == model::DType::F32) return to_gpu(device, arena, data);
  const std::vector<uint16_t> half = model::gpu::to_half(data.data(), data.size());
  vk::BufferSpan s = arena.alloc(half.size() * sizeof(uint16_t));
  vk::upload(device, s, half.data(), s.size);
  return s;
}

std::vector<float> from_gpu(const vk::Device& device, const vk::BufferSpan& span, size_t count,
                            model::DType dtype) {
  if (dtype == model::DType::F32) return from_gpu(device, span, count);
  std::vector<uint16_t> half(count);
  vk::download(device, half.data(), span, count * sizeof(uint16_t));
  std::vector<float> v(count);
  std::transform(half.begin(), half.end(), v.begin(), model::f16_to_f32);
  return v;
}

}  // namespace test
