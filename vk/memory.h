// Device memory: a few large allocations (Arena) carved into sub-buffers (BufferSpan), and the
// copies between host and device. On UMA devices (lavapipe, integrated GPUs, Apple) arenas are
// host-visible and mapped, so uploads and downloads are plain memcpy with no staging buffer.
#pragma once
#include <volk.h>

#include <cstdint>
#include <string>

#include "vk/handle.h"

namespace vk {

class Device;

// A byte range of one VkBuffer: what a descriptor binds and what ops take as tensors.
struct BufferSpan {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize size = 0;
  uint8_t* mapped = nullptr;  // host pointer to offset 0 of this span, when the arena is mapped

  // The sub-range [offset, offset + size) of this span, in bytes.
  BufferSpan sub(VkDeviceSize off, VkDeviceSize bytes) const;
};

// What an arena is for; vk/memory_type.h picks the memory type from it.
enum class MemoryKind {
  Device,    // for kernels: device-local, mapped too when the device is UMA
  Staging,   // host-visible, for copies to a discrete GPU
  Readback,  // host-visible and host-cached where offered: what the host reads back
  Parameters,  // host-visible, device-local where offered: what the host writes for each pass
};

// One VkDeviceMemory bound to one VkBuffer; alloc() hands out aligned sub-ranges in order.
class Arena {
 public:
  // A Device arena counts against the device's memory budget (Device::reserve); running out,
  // by the budget or the driver, throws Device::out_of_memory's message.
  Arena(const Device& device, VkDeviceSize capacity, MemoryKind kind, std::string name);
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&&) = delete;
  ~Arena();

  // Throws vk::Error naming the arena when the request does not fit.
  BufferSpan alloc(VkDeviceSize bytes);
  void reset() { used_ = 0; }  // forget all sub-allocations
  bool mapped() const { return mapped_ != nullptr; }
  VkDeviceSize capacity() const { return capacity_; }
  VkDeviceSize used() const { return used_; }

 private:
  std::string name_;
  VkDeviceSize capacity_ = 0;
  VkDeviceSize used_ = 0;
  VkDeviceSize alignment_ = 16;
  const Device* device_ = nullptr;
  VkDeviceSize reserved_ = 0;      // bytes counted against the device's budget
  Handle<VkDeviceMemory> memory_;  // declared before buffer_: destroyed after it
  Handle<VkBuffer> buffer_;
  uint8_t* mapped_ = nullptr;
};

// Blocking copies for set-up time and tests. Mapped spans are memcpy; others go through a
// staging buffer and one submission with the barriers that make the data visible to shaders.
void upload(const Device& device, const BufferSpan& dst, const void* src, VkDeviceSize bytes);
void download(const Device& device, void* dst, const BufferSpan& src, VkDeviceSize bytes);

}  // namespace vk
