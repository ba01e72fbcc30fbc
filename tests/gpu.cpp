#include "tests/gpu.h"

#include <cstdlib>
#include <cstring>

namespace test {
namespace {

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && (std::strcmp(ci, "true") == 0 || std::strcmp(ci, "1") == 0);
}

vkr::DeviceOptions device_options() {
  vkr::DeviceOptions o;
  if (const char* sel = std::getenv("GPT2VK_TEST_DEVICE")) o.select = sel;  // index or name
  return o;
}

}  // namespace

Gpu::Gpu(const vkr::InstanceOptions& options)
    : instance(options), device(instance, device_options()), kernels(device) {}

Gpu* gpu() {
  static std::unique_ptr<Gpu> shared;
  static std::string failure;
  static bool tried = false;
  if (!tried) {
    tried = true;
    try {
      vkr::InstanceOptions options;
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

ValidationScope::ValidationScope(Gpu& g) : g_(g), start_(g.instance.log().messages) {}

uint32_t ValidationScope::seen() const { return g_.instance.log().messages - start_; }

ValidationScope::~ValidationScope() {
  CHECK_MESSAGE(seen() == expected_, "the Vulkan validation layer reported " << seen()
                                                                           << " message(s) (see stderr)");
}

LoweredGpu::LoweredGpu(Gpu& g, const vkr::LimitOverrides& limits)
    : device(g.instance, {std::to_string(g.device.index()), limits}), kernels(device) {}

uint32_t group_count_limit_x(Gpu& g, uint32_t cheap) {
  const uint32_t limit = g.device.caps().max_workgroup_count[0];
  if (limit <= cheap) return limit;
  MESSAGE("SKIPPED: maxComputeWorkGroupCount[0] = " << limit << " is too large to exceed cheaply");
  return 0;
}

vkr::BufferSpan to_gpu(const vkr::Device& device, vkr::Arena& arena, std::span<const float> data) {
  vkr::BufferSpan s = arena.alloc(data.size_bytes());
  vkr::upload(device, s, data.data(), data.size_bytes());
  return s;
}

std::vector<float> from_gpu(const vkr::Device& device, const vkr::BufferSpan& span, size_t count) {
  std::vector<float> v(count);
  vkr::download(device, v.data(), span, count * sizeof(float));
  return v;
}

vkr::BufferSpan to_gpu(Gpu& g, vkr::Arena& arena, std::span<const float> data) {
  return to_gpu(g.device, arena, data);
}

std::vector<float> from_gpu(Gpu& g, const vkr::BufferSpan& span, size_t count) {
  return from_gpu(g.device, span, count);
}

}  // namespace test
