// A move-only owner for one device-level Vulkan handle. Every VkBuffer, VkPipeline, ... the
// runtime creates lives in one of these, so nothing outside vk/ ever calls vkDestroy*.
#pragma once
#include <volk.h>

#include <utility>

namespace vk {

template <typename T>
class Handle {
 public:
  using Destroy = void (*)(VkDevice, T, const VkAllocationCallbacks*);

  Handle() = default;
  Handle(VkDevice device, T handle, Destroy destroy)
      : device_(device), handle_(handle), destroy_(destroy) {}
  Handle(Handle&& o) noexcept { *this = std::move(o); }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = std::exchange(o.device_, VK_NULL_HANDLE);
      handle_ = std::exchange(o.handle_, VK_NULL_HANDLE);
      destroy_ = std::exchange(o.destroy_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  void reset() {
    if (handle_ != VK_NULL_HANDLE) destroy_(device_, handle_, nullptr);
    handle_ = VK_NULL_HANDLE;
  }
  T get() const { return handle_; }
  const T* ptr() const { return &handle_; }  // for Vulkan calls that take arrays
  operator T() const { return handle_; }
  explicit operator bool() const { return handle_ != VK_NULL_HANDLE; }

 private:
  VkDevice device_ = VK_NULL_HANDLE;
  T handle_ = VK_NULL_HANDLE;
  Destroy destroy_ = nullptr;
};

}  // namespace vk
