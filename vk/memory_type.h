// Which memory type an allocation gets, by what it is for: a pure function of the device's
// memory properties, so it is tested against the property tables of devices this machine
// does not have (tests/test_memory_type.cpp).
#pragma once
#include <volk.h>

#include <vector>

namespace vk {

enum class MemoryPurpose {
  Device,    // the kernels' data: weights, activations, caches, scratch
  Upload,    // the host writes, the device reads once: staging for uploads
  Readback,  // the device writes, the host reads: download staging, a pass's results
  // The host writes a few bytes before each submission that many dispatches then read (a
  // pass's token ids and position): device-local and host-visible where offered (a discrete
  // GPU's BAR window, UMA memory), so the reads do not cross the bus; else host memory.
  Parameters,
};

// The memory types an allocation of `bytes` for `purpose` may use, best first: only types in
// type_bits (VkMemoryRequirements::memoryTypeBits) whose heap can hold `bytes`, never lazily
// allocated, protected or AMD device-coherent ones. Device memory is device-local, and on a UMA
// device (uma) host-visible too where a type offers both, so that uploads are a memcpy; past a
// device-local heap too small for it (an APU's carve-out) it falls back to host-visible system
// memory. Upload memory is host-visible and coherent, preferably neither device-local (a small
// BAR heap) nor cached (write-combined is fastest for the host to write); Readback memory is
// host-cached where a coherent cached type exists, since the host reads it. Empty: none fits.
std::vector<uint32_t> memory_type_candidates(const VkPhysicalDeviceMemoryProperties& props,
                                             uint32_t type_bits, MemoryPurpose purpose,
                                             VkDeviceSize bytes, bool uma);

// Whether the host can map the type and see the device's writes without flushes.
bool memory_type_mappable(const VkPhysicalDeviceMemoryProperties& props, uint32_t type);

}  // namespace vk
