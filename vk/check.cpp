#include "vk/check.h"

namespace vk {

const char* result_name(VkResult r) {
  switch (r) {
#define NAME(x) \
  case x:       \
    return #x;
    NAME(VK_SUCCESS)
    NAME(VK_NOT_READY)
    NAME(VK_TIMEOUT)
    NAME(VK_EVENT_SET)
    NAME(VK_EVENT_RESET)
    NAME(VK_INCOMPLETE)
    NAME(VK_ERROR_OUT_OF_HOST_MEMORY)
    NAME(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    NAME(VK_ERROR_INITIALIZATION_FAILED)
    NAME(VK_ERROR_DEVICE_LOST)
    NAME(VK_ERROR_MEMORY_MAP_FAILED)
    NAME(VK_ERROR_LAYER_NOT_PRESENT)
    NAME(VK_ERROR_EXTENSION_NOT_PRESENT)
    NAME(VK_ERROR_FEATURE_NOT_PRESENT)
    NAME(VK_ERROR_INCOMPATIBLE_DRIVER)
    NAME(VK_ERROR_TOO_MANY_OBJECTS)
    NAME(VK_ERROR_FORMAT_NOT_SUPPORTED)
    NAME(VK_ERROR_FRAGMENTED_POOL)
    NAME(VK_ERROR_UNKNOWN)
    NAME(VK_ERROR_OUT_OF_POOL_MEMORY)
    NAME(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    NAME(VK_ERROR_FRAGMENTATION)
    NAME(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    NAME(VK_PIPELINE_COMPILE_REQUIRED)
#undef NAME
    default:
      return "VkResult(unknown)";
  }
}

void fail_call(const char* call, VkResult r, const char* file, int line) {
  std::string msg = std::string(call) + " failed with " + result_name(r) + " at " + file + ":" +
                    std::to_string(line);
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    msg += " (the device ran out of memory: try a smaller model or --precision f16)";
  if (r == VK_ERROR_DEVICE_LOST) msg += " (the GPU driver reset or crashed the device)";
  throw Error(msg);
}

}  // namespace vk
