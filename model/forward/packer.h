// The arena plan of a model: tensors packed into as few device allocations as the device allows.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "vk/check.h"
#include "vk/context.h"
#include "vk/memory.h"
#include "vk/sizes.h"

namespace model {

// Tensors packed into as few arenas as the device's allocation limit allows (1 GiB at most
// each, which every driver accepts as one buffer). The sizes are known up front, so every
// arena is allocated once at its exact size.
class Packer {
 public:
  Packer(const vk::Device& device, std::string name) : device_(device), name_(std::move(name)) {
    align_ = std::max<uint64_t>(16, device.caps().storage_buffer_alignment);
    cap_ = std::min<uint64_t>(device.caps().max_allocation, uint64_t(1) << 30);
  }
  // Plans a span of `bytes`; returns its handle for span().
  size_t add(uint64_t bytes) {
    bytes = vk::align_up(bytes, align_);
    if (bytes > cap_)
      throw vk::Error(name_ + ": a tensor of " + std::to_string(bytes) +
                      " bytes is larger than one allocation can be on '" + device_.caps().name +
                      "' (" + std::to_string(cap_) + " bytes)");
    if (sizes_.empty() || sizes_.back() + bytes > cap_) sizes_.push_back(0);
    items_.push_back({sizes_.size() - 1, sizes_.back(), bytes});
    sizes_.back() += bytes;
    return items_.size() - 1;
  }
  void allocate(vk::MemoryKind kind) {
    for (size_t i = 0; i < sizes_.size(); i++)
      arenas_.emplace_back(device_, std::max<uint64_t>(sizes_[i], align_), kind,
                           name_ + " " + std::to_string(i));
    for (Item& it : items_) it.span = arenas_[it.arena].alloc(it.bytes);
  }
  const vk::BufferSpan& span(size_t handle) const { return items_[handle].span; }
  uint64_t alignment() const { return align_; }
  uint64_t total() const {
    uint64_t t = 0;
    for (uint64_t s : sizes_) t += s;
    return t;
  }

 private:
  struct Item {
    size_t arena;
    uint64_t offset, bytes;
    vk::BufferSpan span;
  };
  const vk::Device& device_;
  std::string name_;
  uint64_t align_, cap_;
  std::vector<uint64_t> sizes_;
  std::vector<Item> items_;
  std::deque<vk::Arena> arenas_;
};

}  // namespace model
