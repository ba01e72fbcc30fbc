#include "vk/physical_device.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "vk/check.h"

namespace vk {
namespace detail {

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name) {
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice pd) {
  uint32_t n = 0;
  VK_CHECK(vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr));
  std::vector<VkExtensionProperties> v(n);
  VK_CHECK(vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, v.data()));
  return v;
}

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
  if (driver.driverID == VK_DRIVER_ID_MESA_LLVMPIPE) c.loop_iteration_cap = 65535;
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
  c.max_storage_buffers = l.maxPerStageDescriptorStorageBuffers;
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
  const bool memory_model = f12.vulkanMemoryModel;  // the cooperative-matrix module declares it

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
  const std::vector<VkExtensionProperties> exts = device_extensions(pd);
  c.portability_subset = has_extension(exts, "VK_KHR_portability_subset");
  c.coop_matrix_khr = has_extension(exts, "VK_KHR_cooperative_matrix");
  if (has_extension(exts, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) &&
      vkGetPhysicalDeviceCooperativeMatrixPropertiesNV) {
    uint32_t n = 0;
    VK_CHECK(vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, nullptr));
    std::vector<VkCooperativeMatrixPropertiesNV> shapes(
        n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
    VK_CHECK(vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, shapes.data()));
    for (const auto& m : shapes) {
      if (m.scope != VK_SCOPE_SUBGROUP_NV || m.AType != VK_COMPONENT_TYPE_FLOAT16_NV ||
          m.BType != VK_COMPONENT_TYPE_FLOAT16_NV || m.CType != VK_COMPONENT_TYPE_FLOAT32_NV ||
          m.DType != VK_COMPONENT_TYPE_FLOAT32_NV)
        continue;
      c.coop_matrix_shapes += (c.coop_matrix_shapes.empty() ? "" : " ") + std::to_string(m.MSize) +
                              "x" + std::to_string(m.NSize) + "x" + std::to_string(m.KSize);
      if (m.MSize == 16 && m.NSize == 16 && m.KSize == 16)
        c.coop_matrix = c.fp16_arithmetic && memory_model;
    }
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceFeatures2 f{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &coop};
    vkGetPhysicalDeviceFeatures2(pd, &f);
    VkPhysicalDeviceCooperativeMatrixPropertiesNV stages{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_NV};
    VkPhysicalDeviceProperties2 p{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &stages};
    vkGetPhysicalDeviceProperties2(pd, &p);
    if (!coop.cooperativeMatrix ||
        !(stages.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT))
      c.coop_matrix = false;
  }

  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> queues(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, queues.data());
  bool found = false;
  for (uint32_t i = 0; i < nq && !found; i++) {
    if (queues[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      d.queue_family = i;
      c.timestamps = queues[i].timestampValidBits > 0 && l.timestampPeriod > 0;
      c.timestamp_valid_bits = queues[i].timestampValidBits;
      found = true;
    }
  }
  if (!found) d.unusable = "no queue family supports compute";
  return d;
}

namespace {

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

// One line: errors are one line (" device 0 'llvmpipe': usable; device 1 '...': ...").
std::string describe_all(const std::vector<PhysicalDevice>& devices) {
  std::string s;
  for (const auto& d : devices)
    s += (s.empty() ? " device " : "; device ") + std::to_string(d.index) + " '" + d.caps.name +
         "': " + (d.unusable.empty() ? "usable" : d.unusable);
  return s.empty() ? " the Vulkan loader reports no physical device (is a driver installed? "
                     "the CPU reference runs without one: --device cpu)"
                   : s;
}

}  // namespace

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
  throw Error("no Vulkan device matches '" + sel + "' (by " + (by_index ? "index" : "name") +
              "); devices:" + describe_all(devices) +
              "; --device takes an index or part of a name from that list, or cpu for the CPU "
              "reference, which needs no Vulkan");
}

}  // namespace detail

}  // namespace vk
