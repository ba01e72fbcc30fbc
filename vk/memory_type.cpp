#include "vk/memory_type.h"

#include <algorithm>

namespace vk {
namespace {

constexpr VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
constexpr VkMemoryPropertyFlags HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
constexpr VkMemoryPropertyFlags HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
constexpr VkMemoryPropertyFlags CACHED = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
// Lazily allocated (tile memory), protected, and AMD's device-coherent or uncached types (slow,
// for debugging markers): never for tensors.
constexpr VkMemoryPropertyFlags kNever = VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT |
                                         VK_MEMORY_PROPERTY_PROTECTED_BIT |
                                         VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD |
                                         VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD;

struct Want {
  VkMemoryPropertyFlags need, avoid;
};

std::vector<Want> preferences(MemoryPurpose purpose, bool uma) {
  switch (purpose) {
    case MemoryPurpose::Device:
      if (uma) return {{DL | HV | HC, 0}, {DL, 0}, {HV | HC, 0}};
      return {{DL, HV}, {DL, 0}, {HV | HC, 0}};
    case MemoryPurpose::Upload:
      return {{HV | HC, DL | CACHED}, {HV | HC, DL}, {HV | HC, 0}};
    case MemoryPurpose::Readback:
      return {{HV | HC | CACHED, DL}, {HV | HC | CACHED, 0}, {HV | HC, 0}};
    case MemoryPurpose::Parameters:
      return {{DL | HV | HC, 0}, {HV | HC, 0}};
  }
  return {};
}

}  // namespace

std::vector<uint32_t> memory_type_candidates(const VkPhysicalDeviceMemoryProperties& props,
                                             uint32_t type_bits, MemoryPurpose purpose,
                                             VkDeviceSize bytes, bool uma) {
  std::vector<uint32_t> out;
  for (const Want& w : preferences(purpose, uma))
    for (uint32_t i = 0; i < props.memoryTypeCount; i++) {
      const VkMemoryType& t = props.memoryTypes[i];
      const VkMemoryPropertyFlags f = t.propertyFlags;
      const bool fits = props.memoryHeaps[t.heapIndex].size >= bytes;
      const bool listed = std::find(out.begin(), out.end(), i) != out.end();
      if ((type_bits & (1u << i)) && (f & w.need) == w.need && !(f & w.avoid) && !(f & kNever) &&
          fits && !listed)
        out.push_back(i);
    }
  return out;
}

bool memory_type_mappable(const VkPhysicalDeviceMemoryProperties& props, uint32_t type) {
  const VkMemoryPropertyFlags f = props.memoryTypes[type].propertyFlags;
  return (f & (HV | HC)) == (HV | HC);
}

}  // namespace vk
