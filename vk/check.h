// Error handling for the Vulkan runtime: every failing call becomes a vk::Error that names the
// call, where it was made and the VkResult, in every build type.
#pragma once
#include <volk.h>

#include <stdexcept>
#include <string>

namespace vk {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// VkResult as its enum name ("VK_ERROR_OUT_OF_DEVICE_MEMORY").
const char* result_name(VkResult r);

[[noreturn]] void fail_call(const char* call, VkResult r, const char* file, int line);

}  // namespace vk

#define VK_CHECK(call)                                                   \
  do {                                                                   \
    VkResult vk_check_result_ = (call);                                  \
    if (vk_check_result_ < 0)                                            \
      ::vk::fail_call(#call, vk_check_result_, __FILE__, __LINE__);     \
  } while (0)
