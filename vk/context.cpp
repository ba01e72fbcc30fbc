#include "vk/context.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "vk/check.h"
#include "vk/physical_device.h"
#include "vk/pipeline.h"

#if defined(_WIN32)
#include <windows.h>
#else
#include <dlfcn.h>
#endif

namespace vk {
namespace {

using detail::choose;
using detail::describe;
using detail::has_extension;

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

std::vector<VkExtensionProperties> instance_extensions() {
  uint32_t n = 0;
  VK_CHECK(vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr));
  std::vector<VkExtensionProperties> v(n);
  VK_CHECK(vkEnumerateInstanceExtensionProperties(nullptr, &n, v.data()));
  return v;
}

bool has_layer(const char* name) {
  uint32_t n = 0;
  VK_CHECK(vkEnumerateInstanceLayerProperties(&n, nullptr));
  std::vector<VkLayerProperties> v(n);
  VK_CHECK(vkEnumerateInstanceLayerProperties(&n, v.data()));
  for (const auto& l : v)
    if (std::strcmp(l.layerName, name) == 0) return true;
  return false;
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                          VkDebugUtilsMessageTypeFlagsEXT,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data,
                                          void* user) {
  auto* log = static_cast<ValidationLog*>(user);
  {
    std::lock_guard<std::mutex> lock(log->mutex);
    log->last = data->pMessage;
  }
  log->messages++;
  if (log->print) {
    const char* level =
        (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "error" : "warning";
    std::fprintf(stderr, "[vulkan validation %s] %s\n", level, data->pMessage);
  }
  return VK_FALSE;
}

// Loads the Vulkan loader: the system's, or the library `path` names.
void load_loader(const std::string& path) {
  if (path.empty()) {
    if (volkInitialize() != VK_SUCCESS)
      throw Error(
          "no Vulkan loader found (libvulkan.so.1 / vulkan-1.dll / libvulkan.dylib): install the "
          "Vulkan loader (Debian: libvulkan1) and a driver; the CPU reference runs without one: "
          "--device cpu");
    return;
  }
  // Kept loaded for the process's lifetime, as volkInitialize keeps the system's.
#if defined(_WIN32)
  HMODULE lib = LoadLibraryA(path.c_str());
  auto gipa = lib ? reinterpret_cast<PFN_vkGetInstanceProcAddr>(
                        reinterpret_cast<void (*)()>(GetProcAddress(lib, "vkGetInstanceProcAddr")))
                  : nullptr;
  const std::string why = lib ? "it has no vkGetInstanceProcAddr" : "it cannot be loaded";
#else
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  const char* err = lib ? nullptr : dlerror();
  PFN_vkGetInstanceProcAddr gipa = nullptr;
  if (lib) {
    void* sym = dlsym(lib, "vkGetInstanceProcAddr");
    static_assert(sizeof(sym) == sizeof(gipa));
    std::memcpy(&gipa, &sym, sizeof(sym));  // object to function pointer, as POSIX allows
  }
  const std::string why = lib ? "it has no vkGetInstanceProcAddr" : (err ? err : "dlopen failed");
#endif
  if (!gipa)
    throw Error("the Vulkan loader '" + path + "' (GPT2VK_VULKAN_LOADER) is unusable: " + why +
                "; the CPU reference runs without one: --device cpu");
  volkInitializeCustom(gipa);
}

// A positive number from the environment variable `name`; 0 when it is unset or empty.
double env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !(x > 0) || x > 1e15)
    throw Error(std::string(name) + "='" + v + "': not a positive number");
  return x;
}

// "1.5 GiB", "3.0 MiB", "9.0 KiB", "12 bytes".
std::string size_str(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  char s[32];
  if (bytes >= (uint64_t{1} << 30))
    std::snprintf(s, sizeof(s), "%.1f GiB", b / 1073741824.0);
  else if (bytes >= (uint64_t{1} << 20))
    std::snprintf(s, sizeof(s), "%.1f MiB", b / 1048576.0);
  else if (bytes >= 1024)
    std::snprintf(s, sizeof(s), "%.1f KiB", b / 1024.0);
  else
    std::snprintf(s, sizeof(s), "%llu bytes", static_cast<unsigned long long>(bytes));
  return s;
}

}  // namespace

InstanceOptions InstanceOptions::from_env() {
  InstanceOptions o;
  const char* v = std::getenv("GPT2VK_VALIDATION");
  o.validation = v && *v && std::strcmp(v, "0") != 0;
  if (const char* loader = std::getenv("GPT2VK_VULKAN_LOADER")) o.loader = loader;
  return o;
}

const char* device_type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

const char* kernel_set_name(KernelSet s) {
  switch (s) {
    case KernelSet::Gpu: return "gpu";
    case KernelSet::Cpu: return "cpu";
    case KernelSet::Auto: break;
  }
  return "auto";
}

KernelSet parse_kernel_set(const std::string& text, const std::string& where) {
  for (KernelSet s : {KernelSet::Auto, KernelSet::Gpu, KernelSet::Cpu})
    if (text == kernel_set_name(s)) return s;
  throw Error(where + ": '" + text + "' is not a kernel set (auto, gpu or cpu)");
}

DeviceOptions DeviceOptions::from_env() {
  DeviceOptions o;
  o.fence_timeout_s = env_number("GPT2VK_FENCE_TIMEOUT");
  o.overrides.device_memory =
      static_cast<uint64_t>(env_number("GPT2VK_DEVICE_MEMORY_MIB") * 1048576.0);
  o.lose_device_at_wait = static_cast<uint32_t>(env_number("GPT2VK_LOSE_DEVICE_AT_WAIT"));
  if (const char* k = std::getenv("GPT2VK_KERNELS"); k && *k)
    o.kernels = parse_kernel_set(k, "GPT2VK_KERNELS");
  if (const char* m = std::getenv("GPT2VK_COOP_MATRIX"); m && *m) {
    const std::string v = m;
    if (v != "on" && v != "off") throw Error("GPT2VK_COOP_MATRIX='" + v + "': not on or off");
    o.coop_matrix = v == "on";
  }
  return o;
}

Instance::Instance(const InstanceOptions& options) : log_(std::make_unique<ValidationLog>()) {
  load_loader(options.loader);

  std::vector<VkExtensionProperties> exts = instance_extensions();
  std::vector<const char*> enabled;
  VkInstanceCreateFlags flags = 0;
  // MoltenVK is only enumerated when the application accepts portability drivers.
  if (has_extension(exts, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    enabled.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }

  std::vector<const char*> layers;
  if (options.validation) {
    if (has_layer(kValidationLayer) && has_extension(exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
      layers.push_back(kValidationLayer);
      enabled.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
      validation_ = true;
    } else if (options.require_validation) {
      throw Error(std::string(kValidationLayer) +
                  " is not installed (Debian: vulkan-validationlayers; elsewhere the Vulkan SDK)");
    } else {
      std::fprintf(stderr, "gpt2vk: validation requested but %s is not installed\n",
                   kValidationLayer);
    }
  }

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "gpt2vk";
  app.pEngineName = "gpt2vk";
  app.apiVersion = VK_API_VERSION_1_2;

  // Synchronization validation catches the missing barriers that in-order drivers such as
  // lavapipe would hide.
  VkValidationFeatureEnableEXT enables[] = {
      VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enables;

  VkDebugUtilsMessengerCreateInfoEXT messenger{
      VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  messenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                              VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger.pfnUserCallback = on_message;
  messenger.pUserData = log_.get();
  features.pNext = &messenger;  // also reports problems in vkCreateInstance itself

  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pNext = validation_ ? &features : nullptr;
  info.flags = flags;
  info.pApplicationInfo = &app;
  info.enabledLayerCount = static_cast<uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = static_cast<uint32_t>(enabled.size());
  info.ppEnabledExtensionNames = enabled.data();
  VkResult r = vkCreateInstance(&info, nullptr, &instance_);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
    throw Error(
        "no Vulkan driver found (the loader has no ICD supporting Vulkan 1.2): install a driver "
        "(Debian: mesa-vulkan-drivers provides lavapipe); the CPU reference runs without one: "
        "--device cpu");
  VK_CHECK(r);
  volkLoadInstance(instance_);  // device calls go through loader trampolines: any number of devices
  if (validation_) VK_CHECK(vkCreateDebugUtilsMessengerEXT(instance_, &messenger, nullptr, &messenger_));
}

Instance::~Instance() {
  if (!instance_) return;
  if (messenger_) vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  vkDestroyInstance(instance_, nullptr);
}

std::vector<PhysicalDevice> Instance::devices() const {
  uint32_t n = 0;
  VK_CHECK(vkEnumeratePhysicalDevices(instance_, &n, nullptr));
  std::vector<VkPhysicalDevice> handles(n);
  VK_CHECK(vkEnumeratePhysicalDevices(instance_, &n, handles.data()));
  std::vector<PhysicalDevice> out;
  for (uint32_t i = 0; i < n; i++) out.push_back(describe(handles[i], i));
  return out;
}

Device::Device(const Instance& instance, const DeviceOptions& options) : instance_(instance) {
  physical_ = choose(instance.devices(), options.select);
  caps_ = physical_.caps;
  const LimitOverrides& o = options.overrides;
  if (o.max_storage_buffer_range)
    caps_.max_storage_buffer_range = std::min(caps_.max_storage_buffer_range, o.max_storage_buffer_range);
  if (o.max_shared_memory) caps_.max_shared_memory = std::min(caps_.max_shared_memory, o.max_shared_memory);
  if (o.max_workgroup_invocations)
    caps_.max_workgroup_invocations = std::min(caps_.max_workgroup_invocations, o.max_workgroup_invocations);
  if (o.max_texel_buffer_elements)
    caps_.max_texel_buffer_elements =
        std::min(caps_.max_texel_buffer_elements, o.max_texel_buffer_elements);
  if (o.max_workgroup_count_x)
    caps_.max_workgroup_count[0] = std::min(caps_.max_workgroup_count[0], o.max_workgroup_count_x);
  if (o.no_subgroup_arithmetic) caps_.subgroup_arithmetic = false;
  if (o.no_subgroup_shuffle) caps_.subgroup_shuffle = false;
  if (o.no_coop_matrix) caps_.coop_matrix = false;
  if (o.device_memory) caps_.device_local_bytes = o.device_memory;
  fence_timeout_s_ = options.fence_timeout_s > 0 ? options.fence_timeout_s
                     : caps_.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? DeviceOptions::kCpuFenceTimeout
                                                                 : DeviceOptions::kGpuFenceTimeout;
  fence_timeout_set_ = options.fence_timeout_s > 0;
  lose_at_wait_ = options.lose_device_at_wait;
  kernels_asked_ = options.kernels;
  coop_asked_ = options.coop_matrix;
  if (coop_asked_ == false) caps_.coop_matrix = false;
  pipeline_cache_dir_ = options.pipeline_cache_dir;
  budget_ = o.device_memory;

  float priority = 1.0f;
  VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue.queueFamilyIndex = physical_.queue_family;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;

  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.shaderFloat16 = caps_.fp16_arithmetic;
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &f12};
  f11.storageBuffer16BitAccess = caps_.storage_16bit;
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f11};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  coop.cooperativeMatrix = VK_TRUE;

  std::vector<const char*> exts;
  // A portability driver must be told we know it is one (VUID-VkDeviceCreateInfo-pProperties-04451).
  if (caps_.portability_subset) exts.push_back("VK_KHR_portability_subset");
  if (caps_.coop_matrix) {  // matmul_coop.comp: the NV extension, its scopes' memory model
    exts.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    f12.vulkanMemoryModel = VK_TRUE;
    f12.pNext = &coop;
  }

  VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &features};
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue;
  info.enabledExtensionCount = static_cast<uint32_t>(exts.size());
  info.ppEnabledExtensionNames = exts.data();
  VK_CHECK(vkCreateDevice(physical_.handle, &info, nullptr, &device_));
  vkGetDeviceQueue(device_, physical_.queue_family, 0, &queue_);
}

Device::~Device() {
  if (device_) {
    vkDeviceWaitIdle(device_);  // returns in finite time on a lost device too
    kernels_.reset();           // its pipelines belong to device_
    vkDestroyDevice(device_, nullptr);
  }
}

Kernels& Device::kernels() const {
  if (!kernels_) kernels_ = std::make_unique<Kernels>(*this, pipeline_cache_dir_);
  return *kernels_;
}

void Device::reserve(uint64_t bytes, const std::string& what) const {
  const uint64_t before = reserved_.fetch_add(bytes);
  if (budget_ && before + bytes > budget_) {
    reserved_ -= bytes;
    throw Error(out_of_memory(what, bytes, VK_ERROR_OUT_OF_DEVICE_MEMORY));
  }
  uint64_t peak = peak_;
  while (before + bytes > peak && !peak_.compare_exchange_weak(peak, before + bytes)) {
  }
}

std::string Device::out_of_memory(const std::string& what, uint64_t bytes, VkResult r) const {
  return "out of device memory on '" + caps_.name + "': " + what + " needs " + size_str(bytes) +
         ", with " + size_str(reserved_) + " already allocated, of the device's " +
         size_str(caps_.device_local_bytes) + (budget_ ? " (a budget set for testing)" : "") +
         " (" + result_name(r) + "): try --precision f16, a smaller model, or --device cpu";
}

void Device::check_usable() const {
  if (!lost_) return;
  std::lock_guard<std::mutex> lock(lost_mutex_);
  throw Error("device '" + caps_.name + "' cannot run more work: " + lost_reason_);
}

void Device::wait_for(VkFence fence, double timeout_s) const {
  if (timeout_s <= 0) timeout_s = fence_timeout_s_;
  // In waits of at most a second, each counted as what it was asked to wait where it took far
  // longer: the process was stopped meanwhile (SIGSTOP, a user's Ctrl-Z) or the machine slept,
  // and that time is not the GPU's. Stopped through a whole wait, a single wait of timeout_s
  // would return VK_TIMEOUT at once on resuming, and a healthy run would end as a hung GPU.
  timeout_s = std::min(timeout_s, 1e9);
  VkResult r = VK_TIMEOUT;
  for (double spent = 0; spent < timeout_s;) {
    const double slice = std::min(1.0, timeout_s - spent);
    const auto t0 = std::chrono::steady_clock::now();
    r = vkWaitForFences(device_, 1, &fence, VK_TRUE, static_cast<uint64_t>(slice * 1e9));
    if (r != VK_TIMEOUT) break;
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spent += took > slice + 1.0 ? slice : std::max(took, slice);
  }
  if (r == VK_SUCCESS && lose_at_wait_ && ++waits_ == lose_at_wait_)
    r = VK_ERROR_DEVICE_LOST;  // the test hook: the work is done, but report it lost
  if (r == VK_SUCCESS) return;
  std::string why;
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%g", timeout_s);
  if (r == VK_TIMEOUT)
    why = std::string("a submission did not finish within ") + seconds +
          " s (a hung GPU, or work too long for it: try --split-layers N, or a longer "
          "GPT2VK_FENCE_TIMEOUT)";
  else if (r == VK_ERROR_DEVICE_LOST)
    why = "the device was lost (VK_ERROR_DEVICE_LOST) while running a submission: the driver "
          "reset the GPU after a hang, a fault or its watchdog (for a short watchdog: "
          "--split-layers N)";
  else
    VK_CHECK(r);
  {
    std::lock_guard<std::mutex> lock(lost_mutex_);
    if (lost_reason_.empty()) lost_reason_ = why;
  }
  lost_ = true;
  throw Error("device '" + caps_.name + "': " + why);
}

void Device::settle(VkFence fence) const noexcept {
  const double grace = std::max(fence_timeout_s_, 10.0);
  const VkResult r =
      vkWaitForFences(device_, 1, &fence, VK_TRUE, static_cast<uint64_t>(grace * 1e9));
  if (r != VK_TIMEOUT) return;  // done, or lost: either way nothing runs any more
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(lost_mutex_);
    reason = lost_reason_;
  }
  std::fprintf(stderr,
               "gpt2vk: error: device '%s': %s; it still runs after a further %g s, and the memory "
               "it uses cannot be freed safely: ending the process\n",
               caps_.name.c_str(), reason.empty() ? "a submission hung" : reason.c_str(), grace);
  std::_Exit(EXIT_FAILURE);
}

VkPhysicalDeviceMemoryProperties Device::memory_properties() const {
  VkPhysicalDeviceMemoryProperties mem{};
  vkGetPhysicalDeviceMemoryProperties(physical_.handle, &mem);
  return mem;
}


}  // namespace vk
