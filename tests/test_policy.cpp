// The kernel policy: which set a device gets, what each set chooses, and how a user forces one.
// Which kernels each set then runs is checked per op (test_matmul, test_attention, ...) and as
// whole models under both sets (test_goldens, test_model, test_kjv, test_aab, test_cli).
#include <doctest/doctest.h>

#include <cstdlib>

#include "model/ops/gpu/policy.h"
#include "shaders/matmul.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "vk/check.h"

namespace {

vk::DeviceCaps caps_of(VkPhysicalDeviceType type) {
  vk::DeviceCaps c;
  c.name = "test device";
  c.type = type;
  return c;
}

}  // namespace

TEST_CASE("policy: CPU devices get the CPU set, every other device the GPU set") {
  using model::gpu::choose_policy;
  const model::gpu::KernelPolicy cpu = choose_policy(caps_of(VK_PHYSICAL_DEVICE_TYPE_CPU), vk::KernelSet::Auto);
  CHECK(cpu.set == vk::KernelSet::Cpu);
  CHECK(cpu.why == "auto: a CPU device");
  CHECK(cpu.texel_matmul);
  CHECK(cpu.texel_attention);
  CHECK(cpu.texel_layernorm);
  CHECK(cpu.interleaved_weights);
  CHECK_FALSE(cpu.nk_weights);
  CHECK_FALSE(cpu.split_attention);
  CHECK_FALSE(cpu.tiled_attention);
  CHECK(cpu.norm_linear_max_bytes > 0);
  CHECK(cpu.topk_per_invocation == 64);
  for (VkPhysicalDeviceType t :
       {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
        VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU, VK_PHYSICAL_DEVICE_TYPE_OTHER}) {
    CAPTURE(vk::device_type_name(t));
    const model::gpu::KernelPolicy gpu = choose_policy(caps_of(t), vk::KernelSet::Auto);
    CHECK(gpu.set == vk::KernelSet::Gpu);
    CHECK_FALSE(gpu.texel_matmul);
    CHECK_FALSE(gpu.texel_attention);
    CHECK_FALSE(gpu.texel_layernorm);
    CHECK_FALSE(gpu.interleaved_weights);
    CHECK(gpu.nk_weights);
    CHECK(gpu.split_attention);
    CHECK(gpu.tiled_attention);
    // Decoding's GEMV takes the LayerNorm in front of it, up to the tuning's size.
    CHECK(gpu.norm_linear_max_bytes == gpu.tuning.norm_gemv_max_bytes);
    CHECK(gpu.norm_linear_max_bytes > 0);
    CHECK(gpu.topk_per_invocation == 4);
  }
}

TEST_CASE("policy: the GPU set's tuning table, by vendor and architecture") {
  struct Row {
    uint32_t vendor;
    const char* name;
    const char* arch;
    uint32_t gemv;
  };
  const Row rows[] = {{0x1002, "AMD Radeon RX 7900 XTX (RADV NAVI31)", "AMD RDNA", 64},
                      {0x1002, "AMD Radeon RX 580 Series (RADV POLARIS10)", "AMD GCN", 64},
                      {0x10DE, "NVIDIA GeForce RTX 4090", "NVIDIA", 128},
                      {0x8086, "Intel(R) Arc(tm) A770 Graphics (DG2)", "Intel", 32},
                      {0x106B, "Apple M2 Pro", "Apple", 32},
                      {0x5143, "Adreno (TM) 740", "Qualcomm Adreno", 64},
                      {0x13B5, "Mali-G715", "Arm Mali", 16},
                      {0x10005, "llvmpipe (LLVM 15.0.6, 256 bits)", "unknown", 64},
                      {0x1AE0, "SwiftShader Device", "unknown", 64}};
  for (const Row& r : rows) {
    CAPTURE(r.name);
    vk::DeviceCaps c = caps_of(VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU);
    c.vendor_id = r.vendor;
    c.name = r.name;
    const model::gpu::KernelPolicy p = model::gpu::choose_policy(c, vk::KernelSet::Auto);
    CHECK(p.tuning.arch == r.arch);
    CHECK(p.tuning.gemv_workgroup == r.gemv);
    // NVIDIA's measured: 4 rows of W per workgroup, and the matrix units for prompts.
    CHECK(p.tuning.gemv_outs == (r.vendor == 0x10DE ? 4u : 2u));
    CHECK(p.tuning.coop_matrix_prompts == (r.vendor == 0x10DE));
    // A power of two within the wide kernel's declared maximum.
    CHECK((r.gemv & (r.gemv - 1)) == 0);
    CHECK(r.gemv <= push::MATMUL_WIDE_MAX_WORKGROUP);
  }
}

// The measuring knobs beside the table: GPT2VK_NORM_GEMV_MIB moves the largest weight decoding's
// GEMV fuses its LayerNorm into (docs/benchmark.md); a value that is not MiB is refused by name.
TEST_CASE("policy: GPT2VK_NORM_GEMV_MIB sets the fused LayerNorm's limit, or is refused") {
  const vk::DeviceCaps c = caps_of(VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU);
  using model::gpu::choose_policy;
  CHECK(choose_policy(c, vk::KernelSet::Gpu).norm_linear_max_bytes == uint64_t{6} << 20);
  setenv("GPT2VK_NORM_GEMV_MIB", "64", 1);
  CHECK(choose_policy(c, vk::KernelSet::Gpu).norm_linear_max_bytes == uint64_t{64} << 20);
  setenv("GPT2VK_NORM_GEMV_MIB", "0", 1);
  CHECK(choose_policy(c, vk::KernelSet::Gpu).norm_linear_max_bytes == 0);
  for (const char* bad : {"lots", "-1", "12345", "1.5"}) {
    setenv("GPT2VK_NORM_GEMV_MIB", bad, 1);
    CHECK_THROWS_WITH_AS(choose_policy(c, vk::KernelSet::Gpu),
                         doctest::Contains("GPT2VK_NORM_GEMV_MIB"), std::runtime_error);
  }
  unsetenv("GPT2VK_NORM_GEMV_MIB");
}

// GPT2VK_SPLIT_MERGE: the split attention's merge in its own dispatch (fused, the default) or in
// attention_merge's (apart), for measuring the difference on a GPU; anything else is refused.
TEST_CASE("policy: GPT2VK_SPLIT_MERGE chooses where the split attention merges, or is refused") {
  const vk::DeviceCaps c = caps_of(VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU);
  using model::gpu::choose_policy;
  CHECK(choose_policy(c, vk::KernelSet::Gpu).tuning.split_merge_fused);
  setenv("GPT2VK_SPLIT_MERGE", "apart", 1);
  CHECK_FALSE(choose_policy(c, vk::KernelSet::Gpu).tuning.split_merge_fused);
  setenv("GPT2VK_SPLIT_MERGE", "fused", 1);
  CHECK(choose_policy(c, vk::KernelSet::Gpu).tuning.split_merge_fused);
  for (const char* bad : {"yes", "APART", "1"}) {
    setenv("GPT2VK_SPLIT_MERGE", bad, 1);
    CHECK_THROWS_WITH_AS(choose_policy(c, vk::KernelSet::Gpu),
                         doctest::Contains("GPT2VK_SPLIT_MERGE"), std::runtime_error);
  }
  unsetenv("GPT2VK_SPLIT_MERGE");
}

TEST_CASE("policy: either set can be forced on any device") {
  using model::gpu::choose_policy;
  const auto forced_gpu = choose_policy(caps_of(VK_PHYSICAL_DEVICE_TYPE_CPU), vk::KernelSet::Gpu);
  CHECK(forced_gpu.set == vk::KernelSet::Gpu);
  CHECK_FALSE(forced_gpu.interleaved_weights);
  CHECK(forced_gpu.describe() == "gpu (forced (--kernels or GPT2VK_KERNELS)), tuned for unknown");
  const auto forced_cpu =
      choose_policy(caps_of(VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU), vk::KernelSet::Cpu);
  CHECK(forced_cpu.set == vk::KernelSet::Cpu);
  CHECK(forced_cpu.interleaved_weights);

  CHECK(vk::parse_kernel_set("auto", "x") == vk::KernelSet::Auto);
  CHECK(vk::parse_kernel_set("gpu", "x") == vk::KernelSet::Gpu);
  CHECK(vk::parse_kernel_set("cpu", "x") == vk::KernelSet::Cpu);
  CHECK_THROWS_WITH_AS(vk::parse_kernel_set("GPU", "GPT2VK_KERNELS"),
                       "GPT2VK_KERNELS: 'GPU' is not a kernel set (auto, gpu or cpu)", vk::Error);
}

TEST_CASE("policy: matrix units for prompts where the device has them and the tuning or the user asks") {
  using model::gpu::choose_policy;
  vk::DeviceCaps c = caps_of(VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU);
  c.vendor_id = 0x10DE;
  c.name = "NVIDIA H100 80GB HBM3";
  c.subgroup_size = 32;
  c.max_workgroup_invocations = 1024;
  c.max_workgroup_size[0] = c.max_workgroup_size[1] = 1024;
  c.max_shared_memory = 48 * 1024;
  c.coop_matrix = true;
  // Measured faster than the scalar tiles on an H100 (docs/benchmark.md): on unless refused;
  // off for a vendor where they were not measured, unless asked.
  CHECK(choose_policy(c, vk::KernelSet::Auto).coop_matrix);
  c.vendor_id = 0x1002;
  CHECK_FALSE(choose_policy(c, vk::KernelSet::Auto).coop_matrix);
  c.vendor_id = 0x10DE;
  CHECK(choose_policy(c, vk::KernelSet::Auto, true).coop_matrix);
  CHECK(choose_policy(c, vk::KernelSet::Auto, true).describe().find("cooperative matrices") !=
        std::string::npos);
  CHECK_FALSE(choose_policy(c, vk::KernelSet::Auto, false).coop_matrix);
  CHECK_FALSE(choose_policy(c, vk::KernelSet::Cpu, true).coop_matrix);  // the CPU set's own kernels
  c.subgroup_size = 64;  // the tiling's four subgroups are of 32 lanes
  CHECK_FALSE(choose_policy(c, vk::KernelSet::Auto, true).coop_matrix);
  c.subgroup_size = 32;
  c.max_shared_memory = 16 * 1024;  // the large tile's fp16 staging takes 20 KiB
  CHECK_FALSE(choose_policy(c, vk::KernelSet::Auto, true).coop_matrix);
  c.max_shared_memory = 48 * 1024;
  c.max_workgroup_size[0] = 64;  // four subgroups side by side along x
  CHECK_FALSE(choose_policy(c, vk::KernelSet::Auto, true).coop_matrix);
  c.max_workgroup_size[0] = 1024;
  CHECK(choose_policy(c, vk::KernelSet::Auto, true).coop_matrix);
  c.coop_matrix = false;
  CHECK_FALSE(choose_policy(c, vk::KernelSet::Auto, true).coop_matrix);
}

TEST_CASE("policy: GPT2VK_COOP_MATRIX is on or off, and devices says what the device lists") {
  GPU_TEST(g);
  const std::string tiny = (test::source_dir() / "tests/data/models/gpt2-tiny").string();
  const test::CliResult bad =
      test::gpt2vk({"generate", "-m", tiny, "-p", "Hi", "-n", "2"}, {{"GPT2VK_COOP_MATRIX", "yes"}});
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("GPT2VK_COOP_MATRIX='yes': not on or off") != std::string::npos);
  for (const char* v : {"on", "off"}) {
    const test::CliResult r =
        test::gpt2vk({"generate", "-m", tiny, "-p", "Hi", "-n", "2"}, {{"GPT2VK_COOP_MATRIX", v}});
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(test::no_validation_messages(r));
  }
  const test::CliResult devices = test::gpt2vk({"devices"});
  CHECK(devices.out.find("cooperative matrices    ") != std::string::npos);
}

TEST_CASE("policy: a device built with a forced set reports it; the tests' second devices do") {
  GPU_TEST(g);
  for (vk::KernelSet ks : test::kKernelSets) {
    const vk::Device& d = g.with_kernels(ks);
    CHECK(d.kernels_asked() == ks);
    CHECK(model::gpu::Ops(d).policy().set == ks);
  }
}

TEST_CASE("policy: the command line names the set, and refuses a bad one") {
  GPU_TEST(g);
  const std::string tiny = (test::source_dir() / "tests/data/models/gpt2-tiny").string();
  for (const char* set : {"gpu", "cpu"}) {
    const test::CliResult r =
        test::gpt2vk({"generate", "-m", tiny, "-p", "Hi", "-n", "2", "--kernels", set});
    CAPTURE(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.err.find(std::string(set) + " kernels") != std::string::npos);  // the summary line
  }
  const test::CliResult env =
      test::gpt2vk({"generate", "-m", tiny, "-p", "Hi", "-n", "2"}, {{"GPT2VK_KERNELS", "fast"}});
  CHECK(env.exit_code == 1);
  CHECK(env.err.find("GPT2VK_KERNELS: 'fast' is not a kernel set (auto, gpu or cpu)") !=
        std::string::npos);
  CHECK(env.out.empty());
  const test::CliResult flag =
      test::gpt2vk({"generate", "-m", tiny, "-p", "Hi", "--kernels", "fast"});
  CHECK(flag.exit_code != 0);
  CHECK(flag.err.find("--kernels") != std::string::npos);
  // The flag wins over the variable.
  const test::CliResult both = test::gpt2vk(
      {"generate", "-m", tiny, "-p", "Hi", "-n", "2", "--kernels", "gpu"}, {{"GPT2VK_KERNELS", "cpu"}});
  CHECK(both.exit_code == 0);
  CHECK(both.err.find("gpu kernels") != std::string::npos);

  const test::CliResult devices = test::gpt2vk({"devices"}, {{"GPT2VK_KERNELS", "gpu"}});
  CHECK(devices.exit_code == 0);
  CHECK(devices.out.find("kernels                 gpu (forced") != std::string::npos);
}
