#include "vk/context.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "vk/check.h"

namespace vkr {
namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name) {
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

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

std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice pd) {
  uint32_t n = 0;
  VK_CHECK(vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr));
  std::vector<VkExtensionProperties> v(n);
  VK_CHECK(vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, v.data()));
  return v;
}

// Reads properties, features, memory and queues of one device; records why it is unusable.
PhysicalDevice describe(VkPhysicalDevice pd, uint32_t index) {
  PhysicalDevice d;
  d.handle = pd;
  d.index = index;
  DeviceCaps& c = d.caps;

  VkPhysicalDeviceProperties base{};
  vkGetPhysicalDeviceProperties(pd, &base);
  c.name = base.deviceName;
  c.type = base.deviceType;
  c.vendor_id = base.vendorID;
  c.api_version = base.apiVersion;
  if (VK_API_VERSION_MAJOR(base.apiVersion) == 1 && VK_API_VERSION_MINOR(base.apiVersion) < 2) {
    d.unusable = "Vulkan " + std::to_string(VK_API_VERSION_MINOR(base.apiVersion)) +
                 " device; gpt2vk needs Vulkan 1.2";
    return d;
  }

  VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceMaintenance3Properties maint3{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, &subgroup};
  VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES,
                                          &maint3};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &driver};
  vkGetPhysicalDeviceProperties2(pd, &props);
  const VkPhysicalDeviceLimits& l = base.limits;
  c.driver = std::string(driver.driverName) + ", " + driver.driverInfo;
  c.subgroup_size = subgroup.subgroupSize;
  bool compute_subgroups = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  c.subgroup_arithmetic =
      compute_subgroups && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  c.subgroup_shuffle =
      compute_subgroups && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  c.max_shared_memory = l.maxComputeSharedMemorySize;
  c.max_workgroup_invocations = l.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; i++) {
    c.max_workgroup_size[i] = l.maxComputeWorkGroupSize[i];
    c.max_workgroup_count[i] = l.maxComputeWorkGroupCount[i];
  }
  c.max_storage_buffer_range = l.maxStorageBufferRange;
  c.max_push_constants = l.maxPushConstantsSize;
  c.storage_buffer_alignment = l.minStorageBufferOffsetAlignment;
  c.max_texel_buffer_elements = l.maxTexelBufferElements;
  c.texel_buffer_alignment = l.minTexelBufferOffsetAlignment;
  c.storage_texel_buffers = true;
  for (VkFormat f : {VK_FORMAT_R32G32B32A32_UINT, VK_FORMAT_R32G32B32A32_SFLOAT}) {
    VkFormatProperties fp{};
    vkGetPhysicalDeviceFormatProperties(pd, f, &fp);
    if (!(fp.bufferFeatures & VK_FORMAT_FEATURE_STORAGE_TEXEL_BUFFER_BIT))
      c.storage_texel_buffers = false;
  }
  c.max_allocation = maint3.maxMemoryAllocationSize;
  c.timestamp_period_ns = l.timestampPeriod;

  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &f12};
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f11};
  vkGetPhysicalDeviceFeatures2(pd, &features);
  c.storage_16bit = f11.storageBuffer16BitAccess;
  c.fp16_arithmetic = f12.shaderFloat16;

  VkPhysicalDeviceMemoryProperties mem{};
  vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  bool all_local_mappable = true;
  for (uint32_t i = 0; i < mem.memoryTypeCount; i++) {
    VkMemoryPropertyFlags f = mem.memoryTypes[i].propertyFlags;
    if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
      all_local_mappable = false;
  }
  for (uint32_t i = 0; i < mem.memoryHeapCount; i++)
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      c.device_local_bytes = std::max<uint64_t>(c.device_local_bytes, mem.memoryHeaps[i].size);
  // Integrated GPUs, CPU drivers and Apple expose device-local memory the host can map.
  c.uma = all_local_mappable || base.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
          base.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  c.portability_subset = has_extension(device_extensions(pd), "VK_KHR_portability_subset");

  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> queues(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, queues.data());
  bool found = false;
  for (uint32_t i = 0; i < nq && !found; i++) {
    if (queues[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      d.queue_family = i;
      c.timestamps = queues[i].timestampValidBits > 0 && l.timestampPeriod > 0;
      found = true;
    }
  }
  if (!found) d.unusable = "no queue family supports compute";
  return d;
}

int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string describe_all(const std::vector<PhysicalDevice>& devices) {
  std::string s;
  for (const auto& d : devices)
    s += "\n  device " + std::to_string(d.index) + " '" + d.caps.name + "': " +
         (d.unusable.empty() ? "usable" : d.unusable);
  return s.empty() ? "\n  (the Vulkan loader reports no physical device)" : s;
}

const PhysicalDevice& choose(const std::vector<PhysicalDevice>& devices, const std::string& sel) {
  if (sel.empty()) {
    const PhysicalDevice* best = nullptr;
    for (const auto& d : devices)
      if (d.unusable.empty() && (!best || type_rank(d.caps.type) < type_rank(best->caps.type)))
        best = &d;
    if (!best) throw Error("no usable Vulkan device:" + describe_all(devices));
    return *best;
  }
  const bool by_index = std::all_of(sel.begin(), sel.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
  for (const auto& d : devices) {
    bool match = by_index ? std::to_string(d.index) == sel
                          : lower(d.caps.name).find(lower(sel)) != std::string::npos;
    if (!match) continue;
    if (!d.unusable.empty())
      throw Error("Vulkan device " + std::to_string(d.index) + " '" + d.caps.name +
                  "' cannot be used: " + d.unusable);
    return d;
  }
  throw Error("no Vulkan device matches '" + sel + "'; devices:" + describe_all(devices));
}

}  // namespace

InstanceOptions InstanceOptions::from_env() {
  InstanceOptions o;
  const char* v = std::getenv("GPT2VK_VALIDATION");
  o.validation = v && *v && std::strcmp(v, "0") != 0;
  return o;
}

Instance::Instance(const InstanceOptions& options) : log_(std::make_unique<ValidationLog>()) {
  if (volkInitialize() != VK_SUCCESS)
    throw Error(
        "no Vulkan loader found (libvulkan.so.1 / vulkan-1.dll / libvulkan.dylib): install the "
        "Vulkan loader and a driver");

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
        "(Debian: mesa-vulkan-drivers provides lavapipe)");
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

  std::vector<const char*> exts;
  // A portability driver must be told we know it is one (VUID-VkDeviceCreateInfo-pProperties-04451).
  if (caps_.portability_subset) exts.push_back("VK_KHR_portability_subset");

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
    vkDeviceWaitIdle(device_);
    vkDestroyDevice(device_, nullptr);
  }
}

uint32_t Device::memory_type(uint32_t type_bits, bool device_local, bool host_visible) const {
  VkPhysicalDeviceMemoryProperties mem{};
  vkGetPhysicalDeviceMemoryProperties(physical_.handle, &mem);
  VkMemoryPropertyFlags want = 0;
  if (device_local) want |= VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  if (host_visible) want |= VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  for (uint32_t i = 0; i < mem.memoryTypeCount; i++)
    if ((type_bits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want) return i;
  // A host-visible request may settle for memory that is not device-local (staging on dGPUs).
  if (device_local && host_visible) return memory_type(type_bits, false, true);
  throw Error("device '" + caps_.name + "' has no memory type with the needed properties");
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

}  // namespace vkr
