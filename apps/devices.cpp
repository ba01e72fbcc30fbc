// `gpt2vk devices`: every Vulkan device, usable or not (and why), with what the engine reads.
#include <cstdio>
#include <memory>

#include "apps/commands.h"
#include "model/ops/gpu/policy.h"
#include "vk/context.h"

namespace app {
namespace {

struct DevicesArgs {
  bool validation = false;
};

const char* yes(bool b) { return b ? "yes" : "no"; }

void print(const vk::PhysicalDevice& d, const vk::DeviceOptions& asked) {
  const vk::DeviceCaps& c = d.caps;
  std::printf("device %u: %s (%s)\n", d.index, c.name.c_str(), vk::device_type_name(c.type));
  if (!d.unusable.empty()) {
    std::printf("  unusable: %s\n", d.unusable.c_str());
    return;
  }
  std::printf("  driver                  %s\n", c.driver.c_str());
  std::printf("  Vulkan                  %u.%u.%u\n", VK_API_VERSION_MAJOR(c.api_version),
              VK_API_VERSION_MINOR(c.api_version), VK_API_VERSION_PATCH(c.api_version));
  std::printf("  subgroup size           %u (arithmetic %s, shuffle %s)\n", c.subgroup_size,
              yes(c.subgroup_arithmetic), yes(c.subgroup_shuffle));
  std::printf("  shared memory           %u bytes per workgroup\n", c.max_shared_memory);
  std::printf("  workgroup               %u invocations, size %u x %u x %u, count %u x %u x %u\n",
              c.max_workgroup_invocations, c.max_workgroup_size[0], c.max_workgroup_size[1],
              c.max_workgroup_size[2], c.max_workgroup_count[0], c.max_workgroup_count[1],
              c.max_workgroup_count[2]);
  std::printf("  maxStorageBufferRange   %llu bytes (%.1f MiB)\n",
              static_cast<unsigned long long>(c.max_storage_buffer_range),
              static_cast<double>(c.max_storage_buffer_range) / 1048576.0);
  std::printf("  maxPushConstantsSize    %u bytes\n", c.max_push_constants);
  std::printf("  maxMemoryAllocationSize %.1f MiB\n", static_cast<double>(c.max_allocation) / 1048576.0);
  std::printf("  maxTexelBufferElements  %u\n", c.max_texel_buffer_elements);
  std::printf("  fp16 arithmetic         %s\n", yes(c.fp16_arithmetic));
  std::printf("  16-bit storage          %s\n", yes(c.storage_16bit));
  std::printf("  timestamps              %s (%.3g ns per tick, %u valid bits)\n",
              yes(c.timestamps), static_cast<double>(c.timestamp_period_ns),
              c.timestamp_valid_bits);
  std::printf("  memory                  %s, %.1f GiB device-local\n",
              c.uma ? "unified (host-visible device-local)" : "discrete (staging copies)",
              static_cast<double>(c.device_local_bytes) / (1024.0 * 1048576.0));
  std::printf("  cooperative matrices    %s\n",
              !c.coop_matrix_shapes.empty()
                  ? ("VK_NV_cooperative_matrix, fp16 -> fp32 " + c.coop_matrix_shapes +
                     (c.coop_matrix
                          ? " (16x16x16 usable: GPT2VK_COOP_MATRIX)"
                          : " (not usable: no 16x16x16, or a feature it needs is missing)"))
                        .c_str()
              : c.coop_matrix_khr ? "VK_KHR_cooperative_matrix only (not used yet)"
                                  : "none");
  if (c.portability_subset) std::printf("  portability subset      yes (VK_KHR_portability_subset)\n");
  std::printf("  kernels                 %s\n", model::gpu::choose_policy(c, asked.kernels, asked.coop_matrix).describe().c_str());
}

int devices(const DevicesArgs& args) {
  vk::InstanceOptions options = vk::InstanceOptions::from_env();
  options.validation = options.validation || args.validation;
  vk::Instance instance(options);
  std::vector<vk::PhysicalDevice> list = instance.devices();
  if (list.empty()) {
    std::fprintf(stderr, "gpt2vk: the Vulkan loader found no device (is a driver installed?)\n");
    return 1;
  }
  const vk::DeviceOptions asked = vk::DeviceOptions::from_env();
  for (const auto& d : list) print(d, asked);
  return 0;
}

}  // namespace

Command add_devices(CLI::App& cli) {
  auto args = std::make_shared<DevicesArgs>();
  CLI::App* cmd =
      cli.add_subcommand("devices", "list every Vulkan device with its limits and features");
  cmd->add_flag("--validation", args->validation,
                "enable the Khronos validation layer (also: GPT2VK_VALIDATION=1)");
  return {cmd, [args] { return devices(*args); }};
}

}  // namespace app
