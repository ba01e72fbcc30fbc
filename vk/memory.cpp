#include "vk/memory.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "vk/check.h"
#include "vk/context.h"
#include "vk/memory_type.h"
#include "vk/sizes.h"

namespace vk {

BufferSpan BufferSpan::sub(VkDeviceSize off, VkDeviceSize bytes) const {
  if (off + bytes > size)
    throw Error("sub-range [" + std::to_string(off) + ", " + std::to_string(off + bytes) +
                ") is outside a buffer span of " + std::to_string(size) + " bytes");
  return {buffer, offset + off, bytes, mapped ? mapped + off : nullptr};
}

Arena::Arena(const Device& device, VkDeviceSize capacity, MemoryKind kind, std::string name)
    : name_(std::move(name)), capacity_(capacity), device_(&device) {
  const DeviceCaps& caps = device.caps();
  alignment_ = std::max<VkDeviceSize>(16, caps.storage_buffer_alignment);
  if (capacity > caps.max_allocation)
    throw Error("arena '" + name_ + "' needs " + std::to_string(capacity) +
                " bytes, over device '" + caps.name + "' maxMemoryAllocationSize " +
                std::to_string(caps.max_allocation));

  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = capacity;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
               VK_BUFFER_USAGE_STORAGE_TEXEL_BUFFER_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buffer = VK_NULL_HANDLE;
  VK_CHECK(vkCreateBuffer(device.get(), &info, nullptr, &buffer));
  buffer_ = device.own(buffer, vkDestroyBuffer);

  VkMemoryRequirements req{};
  vkGetBufferMemoryRequirements(device.get(), buffer, &req);
  const VkPhysicalDeviceMemoryProperties props = device.memory_properties();
  const MemoryPurpose purpose = kind == MemoryKind::Device       ? MemoryPurpose::Device
                                : kind == MemoryKind::Staging    ? MemoryPurpose::Upload
                                : kind == MemoryKind::Parameters ? MemoryPurpose::Parameters
                                                                 : MemoryPurpose::Readback;
  const std::vector<uint32_t> types =
      memory_type_candidates(props, req.memoryTypeBits, purpose, req.size, caps.uma);
  const std::string what = "arena '" + name_ + "'";
  if (types.empty())
    throw Error(what + ": device '" + caps.name + "' has no memory type for " +
                std::to_string(req.size) + " bytes of this use");
  VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  alloc.allocationSize = req.size;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  if (kind == MemoryKind::Device) device.reserve(alloc.allocationSize, what);
  // The types best first; a heap that is full (not only too small) moves on to the next.
  VkResult r = VK_ERROR_OUT_OF_DEVICE_MEMORY;
  for (uint32_t type : types) {
    alloc.memoryTypeIndex = type;
    r = vkAllocateMemory(device.get(), &alloc, nullptr, &memory);
    if (r != VK_ERROR_OUT_OF_DEVICE_MEMORY && r != VK_ERROR_OUT_OF_HOST_MEMORY) break;
  }
  if (r != VK_SUCCESS && kind == MemoryKind::Device) device.unreserve(alloc.allocationSize);
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    throw Error(device.out_of_memory(what, alloc.allocationSize, r));
  VK_CHECK(r);
  const bool host_visible = memory_type_mappable(props, alloc.memoryTypeIndex);
  if (kind == MemoryKind::Device) reserved_ = alloc.allocationSize;
  memory_ = device.own(memory, vkFreeMemory);
  VK_CHECK(vkBindBufferMemory(device.get(), buffer, memory, 0));
  if (host_visible) {
    void* p = nullptr;
    VK_CHECK(vkMapMemory(device.get(), memory, 0, VK_WHOLE_SIZE, 0, &p));
    mapped_ = static_cast<uint8_t*>(p);
  }
}

Arena::Arena(Arena&& o) noexcept
    : name_(std::move(o.name_)),
      capacity_(o.capacity_),
      used_(o.used_),
      alignment_(o.alignment_),
      device_(o.device_),
      reserved_(std::exchange(o.reserved_, 0)),
      memory_(std::move(o.memory_)),
      buffer_(std::move(o.buffer_)),
      mapped_(std::exchange(o.mapped_, nullptr)) {}

Arena::~Arena() {  // vkFreeMemory unmaps
  if (reserved_) device_->unreserve(reserved_);
}

BufferSpan Arena::alloc(VkDeviceSize bytes) {
  VkDeviceSize start = align_up(used_, alignment_);
  if (bytes == 0 || start + bytes > capacity_)
    throw Error("arena '" + name_ + "' cannot fit " + std::to_string(bytes) + " more bytes (" +
                std::to_string(used_) + " of " + std::to_string(capacity_) + " used)");
  used_ = start + bytes;
  return {buffer_, start, bytes, mapped_ ? mapped_ + start : nullptr};
}

namespace {

// Records `record` into a fresh command buffer, submits it and waits. Set-up time only.
void one_shot(const Device& device, const std::function<void(VkCommandBuffer)>& record) {
  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  pool_info.queueFamilyIndex = device.queue_family();
  VkCommandPool pool_handle = VK_NULL_HANDLE;
  VK_CHECK(vkCreateCommandPool(device.get(), &pool_info, nullptr, &pool_handle));
  Handle<VkCommandPool> pool = device.own(pool_handle, vkDestroyCommandPool);

  VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  alloc.commandPool = pool;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VK_CHECK(vkAllocateCommandBuffers(device.get(), &alloc, &cmd));
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VK_CHECK(vkBeginCommandBuffer(cmd, &begin));
  record(cmd);
  VK_CHECK(vkEndCommandBuffer(cmd));

  VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence fence_handle = VK_NULL_HANDLE;
  VK_CHECK(vkCreateFence(device.get(), &fence_info, nullptr, &fence_handle));
  Handle<VkFence> fence = device.own(fence_handle, vkDestroyFence);
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cmd;
  device.check_usable();
  VK_CHECK(vkQueueSubmit(device.queue(), 1, &submit, fence));
  try {
    device.wait_for(fence);
  } catch (...) {
    device.settle(fence);  // the pool and the fence go next: the copy must be over
    throw;
  }
}

void barrier(VkCommandBuffer cmd, VkPipelineStageFlags src_stage, VkAccessFlags src,
             VkPipelineStageFlags dst_stage, VkAccessFlags dst) {
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = src;
  b.dstAccessMask = dst;
  vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, &b, 0, nullptr, 0, nullptr);
}

void check_range(const BufferSpan& span, VkDeviceSize bytes) {
  if (bytes > span.size)
    throw Error("copy of " + std::to_string(bytes) + " bytes into a span of " +
                std::to_string(span.size));
}

}  // namespace

void upload(const Device& device, const BufferSpan& dst, const void* src, VkDeviceSize bytes) {
  check_range(dst, bytes);
  if (dst.mapped) {
    std::memcpy(dst.mapped, src, bytes);  // coherent: the next vkQueueSubmit makes it visible
    return;
  }
  Arena staging(device, bytes, MemoryKind::Staging, "upload staging");
  BufferSpan s = staging.alloc(bytes);
  std::memcpy(s.mapped, src, bytes);
  one_shot(device, [&](VkCommandBuffer cmd) {
    VkBufferCopy region{s.offset, dst.offset, bytes};
    vkCmdCopyBuffer(cmd, s.buffer, dst.buffer, 1, &region);
    barrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
            VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  });
}

void download(const Device& device, void* dst, const BufferSpan& src, VkDeviceSize bytes) {
  check_range(src, bytes);
  if (src.mapped) {
    std::memcpy(dst, src.mapped, bytes);  // Recorder ends every submission with a host barrier
    return;
  }
  Arena staging(device, bytes, MemoryKind::Readback, "download staging");
  BufferSpan s = staging.alloc(bytes);
  one_shot(device, [&](VkCommandBuffer cmd) {
    barrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
            VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
    VkBufferCopy region{src.offset, s.offset, bytes};
    vkCmdCopyBuffer(cmd, src.buffer, s.buffer, 1, &region);
    barrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
            VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  });
  std::memcpy(dst, s.mapped, bytes);
}

}  // namespace vk
