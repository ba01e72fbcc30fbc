// gpt2vk --version: what was built, and what Vulkan this machine offers it.
#include <exception>
#include <string>

#include "apps/command_line.h"
#include "gpt2vk_version.h"  // GPT2VK_GIT_REVISION, written at build time (cmake/version.cmake)
#include "vk/context.h"

namespace app {

std::string version_text() {
  std::string s = "gpt2vk " GPT2VK_GIT_REVISION "\n";
  try {
    vk::InstanceOptions o = vk::InstanceOptions::from_env();
    o.validation = false;  // names and versions only
    vk::Instance instance(o);
    uint32_t api = 0;
    if (vkEnumerateInstanceVersion && vkEnumerateInstanceVersion(&api) == VK_SUCCESS)
      s += "Vulkan loader " + std::to_string(VK_API_VERSION_MAJOR(api)) + "." +
           std::to_string(VK_API_VERSION_MINOR(api)) + "." +
           std::to_string(VK_API_VERSION_PATCH(api)) + "\n";
    const std::vector<vk::PhysicalDevice> devices = instance.devices();
    if (devices.empty()) s += "no Vulkan device\n";
    for (const vk::PhysicalDevice& d : devices) {
      s += "device " + std::to_string(d.index) + ": " + d.caps.name + " (" +
           vk::device_type_name(d.caps.type) + ")";
      s += d.unusable.empty() ? ", driver " + d.caps.driver : ", unusable: " + d.unusable;
      s += "\n";
    }
  } catch (const std::exception& e) {
    s += "no Vulkan device: " + std::string(e.what()) + "\n";
  }
  s.pop_back();  // CLI11 ends the text with a newline of its own
  return s;
}

}  // namespace app
