// The physical devices behind vk::Instance and vk::Device: what each can do (DeviceCaps), and
// which one a --device selection means. Internal to vk/.
#pragma once
#include <string>
#include <vector>

#include "vk/context.h"

namespace vk::detail {

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name);
std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice pd);
// Reads properties, features, memory and queues of one device; records why it is unusable.
PhysicalDevice describe(VkPhysicalDevice pd, uint32_t index);
// The device `sel` names (an index, or part of a name, any case), or with `sel` empty the best
// usable one (discrete, integrated, virtual, then CPU). Throws a one-line error listing them all.
const PhysicalDevice& choose(const std::vector<PhysicalDevice>& devices, const std::string& sel);

}  // namespace vk::detail
