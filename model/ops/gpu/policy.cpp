#include "model/ops/gpu/policy.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <regex>

#include "model/ops/types.h"  // push:: constants (shaders/matmul.h)

namespace model::gpu {
namespace {

bool has(std::string name, const char* part) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return name.find(part) != std::string::npos;
}

}  // namespace

// SIMD widths from the vendors' documents: AMD GCN runs wave64; RDNA wave32 or wave64 (RADV and
// AMDVLK compile compute as wave64 by default); NVIDIA warps of 32; Intel Xe SIMD8 to SIMD32
// (the driver picks; 32 is its widest); Apple SIMD groups of 32; Qualcomm Adreno waves of 64 or
// 128; Arm Mali Valhall warps of 16 (Bifrost 4 or 8). Not measured on any of them here (no GPU):
// the values follow what llama.cpp's Vulkan backend chooses per vendor for its GEMV.
GpuTuning gpu_tuning(const vk::DeviceCaps& caps) {
  struct Row {
    uint32_t vendor;
    const char* arch;
    uint32_t gemv_workgroup;
    uint32_t gemv_outs;
  };
  // NVIDIA's 128 x 4 was measured: on an H100 (driver 580.159.04, two alternated rounds of
  // GPT2VK_GEMV=32x2, 64x2, 128x2, 128x4), GPT-2 small tg128 844-880 tok/s at 32 x 2 and
  // 994-1,034 at 128 x 4, XL tg64 136-139 and 177-179 (docs/benchmark.md, "The matrix units
  // redone"). The others follow llama.cpp's per-vendor choice, unmeasured here.
  static constexpr Row kTable[] = {{0x1002, "AMD GCN", 64, 2},         {0x10DE, "NVIDIA", 128, 4},
                                   {0x8086, "Intel", 32, 2},           {0x106B, "Apple", 32, 2},
                                   {0x5143, "Qualcomm Adreno", 64, 2}, {0x13B5, "Arm Mali", 16, 2}};
  GpuTuning t;
  for (const Row& r : kTable)
    if (r.vendor == caps.vendor_id) {
      t.arch = r.arch;
      t.gemv_workgroup = r.gemv_workgroup;
      t.gemv_outs = r.gemv_outs;
    }
  // The matrix units for prompts where they were measured faster than the scalar tiles: on an
  // H100, GPT-2 small pp512 73,856 tok/s against 34,939, XL 5,779 against 3,310
  // (docs/benchmark.md, "The matrix units redone").
  t.coop_matrix_prompts = caps.vendor_id == 0x10DE;
  // AMD's two architectures by name: RADV names the chip (NAVI, GFX11...), otherwise the
  // product: RX 5000 to 9000 series cards are RDNA, the RX 400/500 (Polaris) and Vega GCN.
  if (caps.vendor_id == 0x1002 &&
      (has(caps.name, "navi") || has(caps.name, "gfx1") ||
       std::regex_search(caps.name, std::regex("RX [5-9][0-9]{3}", std::regex::icase))))
    t.arch = "AMD RDNA";
  // A measurement's override of the GEMV's shape (docs/benchmark.md): WGxOUTS.
  if (const char* g = std::getenv("GPT2VK_GEMV"); g && *g) {
    std::cmatch m;
    if (!std::regex_match(g, m, std::regex(R"((\d+)x([124]))")) ||
        (std::stoul(m[1]) & (std::stoul(m[1]) - 1)) != 0 || std::stoul(m[1]) > 128)
      throw std::runtime_error(std::string("GPT2VK_GEMV='") + g + "': not WGxOUTS with WG a power "
                               "of two up to 128 and OUTS 1, 2 or 4 (e.g. 128x4)");
    t.gemv_workgroup = static_cast<uint32_t>(std::stoul(m[1]));
    t.gemv_outs = static_cast<uint32_t>(std::stoul(m[2]));
  }
  // And whether the split attention merges in its own dispatch: GPT2VK_SPLIT_MERGE.
  if (const char* g = std::getenv("GPT2VK_SPLIT_MERGE"); g && *g) {
    const std::string v = g;
    if (v != "fused" && v != "apart")
      throw std::runtime_error("GPT2VK_SPLIT_MERGE='" + v + "': not fused or apart");
    t.split_merge_fused = v == "fused";
  }
  // And of the largest weight a decode GEMV fuses its LayerNorm into: GPT2VK_NORM_GEMV_MIB.
  if (const char* g = std::getenv("GPT2VK_NORM_GEMV_MIB"); g && *g) {
    if (!std::regex_match(g, std::regex(R"(\d{1,4})")))
      throw std::runtime_error(std::string("GPT2VK_NORM_GEMV_MIB='") + g +
                               "': not a whole number of MiB up to 9999");
    t.norm_gemv_max_bytes = uint64_t{std::stoul(g)} << 20;
  }
  return t;
}

KernelPolicy choose_policy(const vk::DeviceCaps& caps, vk::KernelSet asked,
                           std::optional<bool> coop) {
  KernelPolicy p;
  if (asked == vk::KernelSet::Auto) {
    const bool cpu = caps.type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    p.set = cpu ? vk::KernelSet::Cpu : vk::KernelSet::Gpu;
    p.why = std::string("auto: ") + (cpu ? "a CPU device" : "not a CPU device");
  } else {
    p.set = asked;
    p.why = "forced (--kernels or GPT2VK_KERNELS)";
  }
  if (p.set == vk::KernelSet::Cpu) {
    // llvmpipe runs a storage-buffer load that differs per lane as a scalar loop, a texel load
    // as one gather, and a workgroup barrier as a coroutine switch.
    p.texel_matmul = p.texel_attention = p.texel_layernorm = p.texel_elementwise = true;
    p.interleaved_weights = true;
    p.norm_linear_max_bytes = uint64_t{1} << 20;
    // 64 logits per invocation: few workgroups, two levels for a vocabulary. GPUs keep many
    // small workgroups, which they fill themselves with.
    p.topk_per_invocation = 64;
  } else {
    p.nk_weights = true;
    p.split_attention = p.tiled_attention = true;
    p.tuning = gpu_tuning(caps);
    p.norm_linear_max_bytes = p.tuning.norm_gemv_max_bytes;
    const bool units = matmul_coop_unsupported(caps, true).empty();
    p.coop_matrix = units && coop.value_or(p.tuning.coop_matrix_prompts);
  }
  return p;
}

std::string matmul_coop_unsupported(const vk::DeviceCaps& caps, bool hardware) {
  const uint32_t wg = push::MATMUL_COOP_LANES * push::MATMUL_COOP_SUBGROUPS;
  if (hardware && !(caps.coop_matrix && caps.subgroup_size == push::MATMUL_COOP_LANES))
    return "device '" + caps.name +
           "' has no cooperative matrices of 16 x 16 x 16 fp16 with 32-lane subgroups";
  if (caps.max_workgroup_invocations < wg || caps.max_workgroup_size[0] < wg)
    return "the cooperative-matrix tiling needs workgroups of " + std::to_string(wg) +
           " invocations; device '" + caps.name + "' allows fewer";
  // The large tile's staged rows of BK + 8 fp16 (A and B; the epilogue reuses A's); the
  // emulation's the same.
  const uint32_t shared = 2 * push::MATMUL_COOP_LARGE * (push::MATMUL_COOP_BK + 8) * 2;
  if (caps.max_shared_memory < shared)
    return "needs " + std::to_string(shared) + " bytes of shared memory; device '" + caps.name +
           "' allows " + std::to_string(caps.max_shared_memory);
  return {};
}

std::string KernelPolicy::describe() const {
  return std::string(vk::kernel_set_name(set)) + " (" + why + ")" +
         (set == vk::KernelSet::Gpu ? ", tuned for " + tuning.arch : "") +
         (coop_matrix ? ", cooperative matrices for prompts" : "");
}

}  // namespace model::gpu
