// Instance, physical-device discovery and the logical device: the part of Vulkan that is set up
// once per process. Everything the engine needs to know about a device is read once into
// DeviceCaps, so kernels and tests never query Vulkan for limits themselves.
#pragma once
#include <volk.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "vk/handle.h"

namespace vk {

struct InstanceOptions {
  bool validation = false;          // Khronos validation layer with synchronization validation
  bool require_validation = false;  // fail (instead of warn) when the layer is not installed
  // The Vulkan loader library to load; "" = the system's (libvulkan.so.1, vulkan-1.dll, ...).
  std::string loader;
  // GPT2VK_VALIDATION=1 turns validation on for users; GPT2VK_VULKAN_LOADER=PATH names a loader.
  static InstanceOptions from_env();
};

// Counts every warning and error the validation layer reports, so a test can assert zero.
struct ValidationLog {
  std::atomic<uint32_t> messages{0};
  std::atomic<bool> print{true};  // also write each message to stderr
  std::mutex mutex;
  std::string last;  // the latest message, guarded by mutex
};

// The features and limits the engine relies on, read once per physical device.
struct DeviceCaps {
  std::string name;
  std::string driver;  // driver name and info ("llvmpipe, Mesa 22.3.6 (LLVM 15.0.6)")
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t vendor_id = 0;
  uint32_t api_version = 0;

  uint32_t subgroup_size = 1;
  bool subgroup_arithmetic = false;  // in compute shaders
  bool subgroup_shuffle = false;

  uint32_t max_shared_memory = 0;  // bytes per workgroup
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_workgroup_size[3] = {};
  uint32_t max_workgroup_count[3] = {};

  uint64_t max_storage_buffer_range = 0;  // largest range one descriptor may bind
  uint32_t max_storage_buffers = 0;  // maxPerStageDescriptorStorageBuffers (Vulkan's minimum: 4)
  uint32_t max_push_constants = 0;
  uint64_t storage_buffer_alignment = 0;  // minStorageBufferOffsetAlignment
  uint32_t max_texel_buffer_elements = 0;
  uint64_t texel_buffer_alignment = 0;  // minTexelBufferOffsetAlignment
  // R32G32B32A32_UINT and _SFLOAT are usable as storage texel buffers (imageLoad).
  bool storage_texel_buffers = false;
  uint64_t max_allocation = 0;  // maxMemoryAllocationSize

  bool fp16_arithmetic = false;  // shaderFloat16
  bool storage_16bit = false;    // storageBuffer16BitAccess
  bool timestamps = false;       // the compute queue can write timestamps
  float timestamp_period_ns = 0;
  uint32_t timestamp_valid_bits = 0;  // of the compute queue's 64-bit timestamps (Intel: 36)

  // Loop iterations one shader invocation may run, all its loops together, before the driver
  // silently ends every loop: llvmpipe (lavapipe) counts them against 65,535 per invocation
  // (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS) and carries on with what was summed so far. 0: no
  // such cap. Kernels whose loops grow with a shape split their work to stay under it.
  uint32_t loop_iteration_cap = 0;

  bool uma = false;  // device-local memory is also host-visible: no staging copies needed
  uint64_t device_local_bytes = 0;
  bool portability_subset = false;  // MoltenVK and other non-conformant layered drivers

  // VK_NV_cooperative_matrix lists the 16 x 16 x 16 subgroup shape with fp16 A and B and fp32
  // C and D that shaders/matmul_coop.comp uses (and the device has shaderFloat16).
  bool coop_matrix = false;
  // Every fp16 x fp16 + fp32 subgroup shape the driver lists, "MxNxK" apart by spaces, of the
  // NV extension; and whether VK_KHR_cooperative_matrix is exposed (no kernel uses it yet:
  // Debian 12's glslang cannot compile it).
  std::string coop_matrix_shapes;
  bool coop_matrix_khr = false;
};

// Limits a test can lower to exercise fallback paths on a device that does not need them.
// Zero keeps the device's own value; a value above the device's is ignored.
// Which of the engine's two kernel sets a device runs: what GPUs get, or what CPU Vulkan devices
// (lavapipe) get. Auto lets model/ops/gpu/policy.h decide by the device; Gpu and Cpu force one,
// so that a test or a user can run either set on any device.
enum class KernelSet { Auto, Gpu, Cpu };
const char* kernel_set_name(KernelSet s);  // "auto" | "gpu" | "cpu"
// "auto" | "gpu" | "cpu"; throws vk::Error naming `where` (a flag, a variable) otherwise.
KernelSet parse_kernel_set(const std::string& text, const std::string& where);

struct LimitOverrides {
  uint64_t max_storage_buffer_range = 0;
  uint32_t max_shared_memory = 0;
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_texel_buffer_elements = 0;
  uint32_t max_workgroup_count_x = 0;  // maxComputeWorkGroupCount[0]: 1-D ops fold into y past it
  // Report no subgroup arithmetic, so kernels take their shared-memory reduction paths.
  bool no_subgroup_arithmetic = false;
  // Report no subgroup shuffles, so the interleaved matmul loads x in every invocation.
  bool no_subgroup_shuffle = false;
  // Report no cooperative matrices, so prefill takes the scalar tiles.
  bool no_coop_matrix = false;
  // Device-local bytes all arenas together may take. Unlike the limits above it is enforced only
  // when set: drivers' heap sizes are not hard limits (lavapipe reports 2 GiB and allocates
  // more), so without it the driver's own VK_ERROR_OUT_OF_DEVICE_MEMORY is what refuses.
  uint64_t device_memory = 0;
};

struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  uint32_t index = 0;
  DeviceCaps caps;
  uint32_t queue_family = 0;
  std::string unusable;  // empty when usable; otherwise why not
};

class Instance {
 public:
  // Throws vk::Error when there is no Vulkan loader or no instance can be made.
  explicit Instance(const InstanceOptions& options = InstanceOptions::from_env());
  // Not movable: Device and the debug messenger keep pointers into it.
  Instance(Instance&&) = delete;
  Instance& operator=(Instance&&) = delete;
  Instance(const Instance&) = delete;
  ~Instance();

  VkInstance get() const { return instance_; }
  bool validation() const { return validation_; }
  ValidationLog& log() const { return *log_; }
  std::vector<PhysicalDevice> devices() const;

 private:
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  bool validation_ = false;
  std::unique_ptr<ValidationLog> log_;
};

struct DeviceOptions {
  // "" picks the first usable device, discrete before integrated before CPU; digits pick by
  // index; anything else is matched case-insensitively against the device name.
  std::string select;
  LimitOverrides overrides;
  // How long one submission may run before it counts as hung; 0 = kGpuFenceTimeout on GPUs,
  // The kernel set asked for (GPT2VK_KERNELS, --kernels); kernel_set() says what it became.
  KernelSet kernels = KernelSet::Auto;
  // kCpuFenceTimeout on CPU devices (lavapipe runs a GPT-2 XL prefill for minutes).
  double fence_timeout_s = 0;
  // Where the pipeline cache is kept between runs (vk/pipeline_cache.h); "" keeps none. The
  // commands pass default_cache_dir(); tests and library users choose.
  std::filesystem::path pipeline_cache_dir;
  // Test hook: the n-th fence wait on this device (counting from 1) reports
  // VK_ERROR_DEVICE_LOST after the real wait, as a driver reset would. 0 = off.
  uint32_t lose_device_at_wait = 0;
  // Prompts' matmuls on the device's matrix units (GPT2VK_COOP_MATRIX=on|off): off never, on
  // wherever the device has them, unset as the kernel policy's tuning table decides.
  std::optional<bool> coop_matrix;

  static constexpr double kGpuFenceTimeout = 20;
  static constexpr double kCpuFenceTimeout = 600;

  // The options the environment gives: GPT2VK_FENCE_TIMEOUT=SECONDS, and for tests
  // GPT2VK_KERNELS=auto|gpu|cpu, and for tests GPT2VK_DEVICE_MEMORY_MIB=N
  // (overrides.device_memory) and GPT2VK_LOSE_DEVICE_AT_WAIT=N.
  // Throws vk::Error naming the variable when a value is not a positive number.
  static DeviceOptions from_env();
};

class Kernels;

class Device {
 public:
  // Throws vk::Error naming each device and why it was not taken.
  Device(const Instance& instance, const DeviceOptions& options = {});
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();

  VkDevice get() const { return device_; }
  VkPhysicalDevice physical() const { return physical_.handle; }
  uint32_t index() const { return physical_.index; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return physical_.queue_family; }
  const DeviceCaps& caps() const { return caps_; }
  const Instance& instance() const { return instance_; }
  // The kernel set asked for (options.kernels): the user's request, which model::gpu::Ops
  // resolves (Auto by the device's type) once for everything it runs.
  KernelSet kernels_asked() const { return kernels_asked_; }
  // Whether prompts' matmuls are asked to run on the matrix units (options.coop_matrix).
  std::optional<bool> coop_matrix_asked() const { return coop_asked_; }

  // The physical device's memory types and heaps (vk/memory_type.h chooses among them).
  VkPhysicalDeviceMemoryProperties memory_properties() const;

  // Device-local memory the arenas hold, for the budget of overrides.device_memory and for the
  // out-of-memory message. reserve() throws that message when `bytes` would pass the budget.
  void reserve(uint64_t bytes, const std::string& what) const;
  void unreserve(uint64_t bytes) const { reserved_ -= bytes; }
  // Those bytes now, and the most they have been at once since the device was made (what
  // `train` reports as its peak device memory).
  uint64_t allocated() const { return reserved_; }
  uint64_t peak_allocated() const { return peak_; }
  // "out of device memory on '<device>': <what> needs N MiB, with M MiB already allocated, of
  // the device's H MiB ...": for the budget and for a driver's VK_ERROR_OUT_OF_DEVICE_MEMORY.
  std::string out_of_memory(const std::string& what, uint64_t bytes, VkResult r) const;

  // Fence waits and device loss. wait_for() waits at most timeout_s (0: fence_timeout_s());
  // VK_TIMEOUT and VK_ERROR_DEVICE_LOST mark the device lost and throw a vk::Error saying
  // what happened. After that, check_usable() (called before every submission) throws.
  double fence_timeout_s() const { return fence_timeout_s_; }
  // Whether the user set it (DeviceOptions::fence_timeout_s): then it is kept exactly, not
  // scaled by a pass's expected time.
  bool fence_timeout_set() const { return fence_timeout_set_; }
  void wait_for(VkFence fence, double timeout_s = 0) const;
  void check_usable() const;
  bool lost() const { return lost_; }
  // For destructors of things a submission still uses: waits for `fence` a while longer (at
  // least 10 s). If it still has not signalled, the GPU is hung and nothing it uses can be freed
  // safely: the process ends with the reason on stderr and exit code 1.
  void settle(VkFence fence) const noexcept;

  // The pipelines every model on this device shares (vk/pipeline.h), each created on first
  // request: a second model, or a test's fortieth, compiles only what the first did not. Not
  // thread-safe, like the rest of a Device's users.
  Kernels& kernels() const;

  template <typename T>
  Handle<T> own(T h, typename Handle<T>::Destroy destroy) const {
    return Handle<T>(device_, h, destroy);
  }

 private:
  const Instance& instance_;
  PhysicalDevice physical_;
  DeviceCaps caps_;  // physical_.caps with the overrides applied
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  KernelSet kernels_asked_ = KernelSet::Auto;
  std::optional<bool> coop_asked_;
  double fence_timeout_s_ = DeviceOptions::kGpuFenceTimeout;
  bool fence_timeout_set_ = false;
  uint32_t lose_at_wait_ = 0;
  uint64_t budget_ = 0;  // overrides.device_memory; 0 = the driver decides
  mutable std::atomic<uint32_t> waits_{0};
  mutable std::atomic<uint64_t> reserved_{0}, peak_{0};
  mutable std::atomic<bool> lost_{false};
  mutable std::mutex lost_mutex_;
  mutable std::string lost_reason_;  // guarded by lost_mutex_
  std::filesystem::path pipeline_cache_dir_;
  mutable std::unique_ptr<Kernels> kernels_;
};

const char* device_type_name(VkPhysicalDeviceType t);

}  // namespace vk
