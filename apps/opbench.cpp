// `gpt2vk opbench`: GPU time of every op at GPT-2 small shapes, from timestamp queries. The
// baseline later performance work is measured against; it is not a model benchmark.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/options.h"
#include "model/ops/gpu/activation.h"
#include "model/ops/gpu/attention.h"
#include "model/ops/gpu/embedding.h"
#include "model/ops/gpu/kv_store.h"
#include "model/ops/gpu/layernorm.h"
#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/matmul.h"
#include "model/ops/gpu/topk.h"
#include "vk/check.h"

namespace app {
namespace {

struct OpbenchArgs {
  std::string device;         // index or name; "" = the first GPU
  std::string precision = "f16";
  int repeats = 10;
  uint32_t prefill = 128;     // tokens of the prefill shapes (decode attends to this many)
  std::string only;           // time only the ops whose name contains this
  std::string kernels;         // auto | gpu | cpu; "" = GPT2VK_KERNELS, else auto
};

// GPT-2 small.
constexpr uint32_t C = 768, H = 12, V = 50257, N_CTX = 1024;

struct Bench {
  vk::Device& device;
  const model::gpu::Ops& kernels;
  vk::Arena& arena;
  int repeats;
  std::string only;

  vk::BufferSpan floats(size_t n) {
    vk::BufferSpan s = arena.alloc(n * sizeof(float));
    std::vector<float> v(n);
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
    for (float& x : v) x = dist(rng);
    vk::upload(device, s, v.data(), s.size);
    return s;
  }

  model::gpu::Weight weight(size_t n, model::DType dtype) {
    if (dtype == model::DType::F32) return {floats(n), dtype};
    std::vector<float> v(n, 0.01f);
    std::vector<uint16_t> h = model::gpu::to_half(v.data(), n);
    vk::BufferSpan s = arena.alloc(h.size() * sizeof(uint16_t));
    vk::upload(device, s, h.data(), s.size);
    return {s, dtype};
  }

  // W [N, K] in the Interleaved layout (matmul_interleaved.glsl), from random values.
  model::gpu::Weight interleaved(uint32_t K, uint32_t N, model::DType dtype) {
    std::vector<float> v(size_t(K) * N);
    std::mt19937 rng(K ^ N);
    std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
    for (float& x : v) x = dist(rng);
    std::vector<uint8_t> packed(model::gpu::interleaved_bytes(dtype, K, N));
    if (dtype == model::DType::F16) {
      std::vector<uint16_t> h = model::gpu::to_half(v.data(), v.size());
      model::gpu::interleave(packed.data(), h.data(), model::WeightLayout::NK, dtype, K, N);
    } else {
      model::gpu::interleave(packed.data(), v.data(), model::WeightLayout::NK, dtype, K, N);
    }
    vk::BufferSpan s = arena.alloc(packed.size());
    vk::upload(device, s, packed.data(), s.size);
    return {s, dtype};
  }

  // Records `op` `repeats` times in one command buffer and prints its mean GPU time per call.
  void time(const std::string& name, const std::string& shape, const std::function<void(vk::Recorder&)>& op) {
    if (name.find(only) == std::string::npos) return;
    vk::Recorder rec(device, true);
    rec.begin();
    op(rec);  // warm-up call, not counted
    rec.run();
    rec.begin();
    for (int r = 0; r < repeats; r++) op(rec);
    rec.run();
    double total = 0;
    for (const vk::DispatchTime& t : rec.timings()) total += t.ms;
    std::printf("%-22s %-34s %4u %10.3f\n", name.c_str(), shape.c_str(),
                rec.stats().dispatches / static_cast<uint32_t>(repeats), total / repeats);
  }
};

void run_shapes(Bench& b, uint32_t T, uint32_t L, model::DType dtype) {
  const std::string t = "T=" + std::to_string(T);
  vk::BufferSpan x = b.floats(size_t(T) * C), y = b.floats(size_t(T) * C);
  vk::BufferSpan qkv = b.floats(size_t(T) * 3 * C), h4 = b.floats(size_t(T) * 4 * C);
  vk::BufferSpan kc = b.floats(size_t(N_CTX) * C), vc = b.floats(size_t(N_CTX) * C);
  vk::BufferSpan gamma = b.floats(C), beta = b.floats(C), b3 = b.floats(3 * C),
                  b4 = b.floats(4 * C), b1 = b.floats(C);
  model::gpu::Weight w_qkv = b.weight(size_t(C) * 3 * C, dtype), w_proj = b.weight(size_t(C) * C, dtype);
  model::gpu::Weight w_fc = b.weight(size_t(C) * 4 * C, dtype), w_fc2 = b.weight(size_t(4) * C * C, dtype);
  model::gpu::Weight wte = b.weight(size_t(V) * C, dtype), wpe = b.weight(size_t(N_CTX) * C, dtype);
  vk::BufferSpan ids = b.arena.alloc(T * sizeof(int32_t));
  model::gpu::upload_ids(b.device, ids, std::vector<int32_t>(T, 42), V);
  vk::BufferSpan logits = b.floats(size_t(T) * V);
  vk::BufferSpan top_ids = b.arena.alloc(64 * 4), top_vals = b.arena.alloc(64 * 4);
  vk::BufferSpan scratch =
      b.arena.alloc(std::max<size_t>(16, model::gpu::topk_scratch_bytes(b.kernels, V, 40)));
  const model::gpu::Ops& k = b.kernels;
  model::gpu::MatmulOptions kn, nk, gelu;
  nk.layout = model::WeightLayout::NK;
  gelu.act = model::Activation::GeluTanh;

  b.time("embedding", t + " C=768", [&](vk::Recorder& r) {
    model::gpu::embedding(k, r,
                          {.out = x,
                           .ids = ids,
                           .wte = wte,
                           .wpe = &wpe,
                           .T = T,
                           .C = C,
                           .V = V,
                           .n_pos = N_CTX,
                           .pos_offset = L - T,
                           .position = model::PositionKind::Learned});
  });
  b.time("layernorm", t + " C=768", [&](vk::Recorder& r) {
    model::gpu::layernorm(
        k, r, {.out = y, .x = x, .gamma = gamma, .beta = beta, .T = T, .C = C, .eps = 1e-5f});
  });
  b.time("matmul qkv +bias", t + " 768->2304", [&](vk::Recorder& r) {
    model::gpu::matmul(
        k, r,
        {.out = qkv, .x = y, .w = w_qkv, .bias = &b3, .T = T, .K = C, .N = 3 * C, .options = kn});
  });
  b.time("kv_store", t + " pos=" + std::to_string(L - T), [&](vk::Recorder& r) {
    model::gpu::kv_store(k, r,
                         {.k_cache = kc, .v_cache = vc, .qkv = qkv, .T = T, .C = C, .pos = L - T});
  });
  b.time("attention", t + " L=" + std::to_string(L) + " H=12", [&](vk::Recorder& r) {
    model::gpu::attention(k, r,
                          {.out = y,
                           .q = qkv,
                           .k_cache = kc,
                           .v_cache = vc,
                           .q_stride = 3 * C,
                           .T = T,
                           .L = L,
                           .C = C,
                           .H = H});
  });
  if (T > model::gpu::kAttentionSplitMaxT) {  // a prompt: the one-query-per-workgroup kernel too
    model::gpu::AttentionOptions portable{.kernel = model::gpu::AttentionKernel::Portable};
    b.time("attention portable", t + " L=" + std::to_string(L) + " H=12", [&](vk::Recorder& r) {
      model::gpu::attention(k, r,
                            {.out = y,
                             .q = qkv,
                             .k_cache = kc,
                             .v_cache = vc,
                             .q_stride = 3 * C,
                             .T = T,
                             .L = L,
                             .C = C,
                             .H = H,
                             .options = portable});
    });
  }
  if (T == 1)  // decode at the end of GPT-2's context
    b.time("attention", t + " L=1024 H=12", [&](vk::Recorder& r) {
      model::gpu::attention(k, r,
                            {.out = y,
                             .q = qkv,
                             .k_cache = kc,
                             .v_cache = vc,
                             .q_stride = 3 * C,
                             .T = T,
                             .L = N_CTX,
                             .C = C,
                             .H = H});
    });
  // What the model runs: kv_store and attention, one dispatch where the texel kernel runs; with
  // the model's scratch, so the GPU set decodes with the split kernel and the tiled kernel
  // splits a short prompt's keys.
  vk::BufferSpan part = b.arena.alloc(model::gpu::attention_model_scratch_bytes(
      b.kernels.policy(), N_CTX, C, H));
  model::gpu::AttentionOptions with_scratch;
  with_scratch.scratch = &part;
  b.time("attention_store", t + " pos=" + std::to_string(L - T) + " H=12", [&](vk::Recorder& r) {
    model::gpu::attention_store(k, r,
                                {.out = y,
                                 .k_cache = kc,
                                 .v_cache = vc,
                                 .qkv = qkv,
                                 .T = T,
                                 .pos = L - T,
                                 .C = C,
                                 .H = H,
                                 .options = with_scratch});
  });
  b.time("matmul proj +res", t + " 768->768", [&](vk::Recorder& r) {
    model::gpu::matmul(k, r,
                       {.out = x,
                        .x = y,
                        .w = w_proj,
                        .bias = &b1,
                        .residual = &x,
                        .T = T,
                        .K = C,
                        .N = C,
                        .options = kn});
  });
  b.time("matmul fc +gelu", t + " 768->3072", [&](vk::Recorder& r) {
    model::gpu::matmul(
        k, r,
        {.out = h4, .x = y, .w = w_fc, .bias = &b4, .T = T, .K = C, .N = 4 * C, .options = gelu});
  });
  b.time("matmul fc2 +res", t + " 3072->768", [&](vk::Recorder& r) {
    model::gpu::matmul(k, r,
                       {.out = x,
                        .x = h4,
                        .w = w_fc2,
                        .bias = &b1,
                        .residual = &x,
                        .T = T,
                        .K = 4 * C,
                        .N = C,
                        .options = kn});
  });
  b.time("activation gelu", t + " n=" + std::to_string(T * 4 * C), [&](vk::Recorder& r) {
    model::gpu::activation(
        k, r, {.out = h4, .x = h4, .n = T * 4 * C, .kind = model::Activation::GeluTanh});
  });
  b.time("matmul lm_head (wte^T)", t + " 768->50257", [&](vk::Recorder& r) {
    model::gpu::matmul(k, r,
                       {.out = logits, .x = y, .w = wte, .T = T, .K = C, .N = V, .options = nk});
  });
  if (model::gpu::matmul_interleaved_supported(b.device.caps(), dtype, C)) {
    model::gpu::MatmulOptions il, il_gelu;
    il.layout = il_gelu.layout = model::WeightLayout::Interleaved;
    il_gelu.act = model::Activation::GeluTanh;
    model::gpu::Weight i_qkv = b.interleaved(C, 3 * C, dtype), i_fc = b.interleaved(C, 4 * C, dtype);
    model::gpu::Weight i_fc2 = b.interleaved(4 * C, C, dtype), i_head = b.interleaved(C, V, dtype);
    b.time("interleaved qkv +bias", t + " 768->2304", [&](vk::Recorder& r) {
      model::gpu::matmul(
          k, r,
          {.out = qkv, .x = y, .w = i_qkv, .bias = &b3, .T = T, .K = C, .N = 3 * C, .options = il});
    });
    b.time("interleaved fc +gelu", t + " 768->3072", [&](vk::Recorder& r) {
      model::gpu::matmul(k, r,
                         {.out = h4,
                          .x = y,
                          .w = i_fc,
                          .bias = &b4,
                          .T = T,
                          .K = C,
                          .N = 4 * C,
                          .options = il_gelu});
    });
    b.time("interleaved fc2 +res", t + " 3072->768", [&](vk::Recorder& r) {
      model::gpu::matmul(k, r,
                         {.out = x,
                          .x = h4,
                          .w = i_fc2,
                          .bias = &b1,
                          .residual = &x,
                          .T = T,
                          .K = 4 * C,
                          .N = C,
                          .options = il});
    });
    b.time("interleaved lm_head", t + " 768->50257", [&](vk::Recorder& r) {
      model::gpu::matmul(
          k, r, {.out = logits, .x = y, .w = i_head, .T = T, .K = C, .N = V, .options = il});
    });
  }
  b.time("topk k=40", "V=50257", [&](vk::Recorder& r) {
    model::gpu::topk(k, r,
                     {.out_ids = top_ids,
                      .out_values = top_vals,
                      .logits = logits,
                      .scratch = scratch,
                      .V = V,
                      .k = 40});
  });
}

int opbench(const OpbenchArgs& args) {
  vk::Instance instance;
  vk::DeviceOptions options = vk::DeviceOptions::from_env();  // GPT2VK_COOP_MATRIX, ...
  options.select = args.device;
  if (!args.kernels.empty()) options.kernels = vk::parse_kernel_set(args.kernels, "--kernels");
  vk::Device device(instance, options);
  if (!device.caps().timestamps) throw vk::Error("device '" + device.caps().name + "' has no compute timestamps");
  const model::DType dtype = args.precision == "f32" ? model::DType::F32 : model::DType::F16;
  vk::Kernels pipelines(device);
  const model::gpu::Ops kernels(pipelines);
  std::printf("device: %s, %s kernels, weights %s, mean of %d calls after a warm-up\n",
              device.caps().name.c_str(), kernels.policy().describe().c_str(),
              args.precision.c_str(), args.repeats);
  std::printf("%-22s %-34s %4s %10s\n", "op", "shape", "disp", "ms/call");
  for (uint32_t T : {1u, args.prefill}) {
    // Weights and activations for one shape set; GPT-2 small in fp32 needs ~700 MB at T=128.
    vk::Arena arena(device, 760ull << 20, vk::MemoryKind::Device, "opbench");
    Bench b{device, kernels, arena, args.repeats, args.only};
    run_shapes(b, T, T == 1 ? args.prefill : T, dtype);
  }
  return 0;
}

}  // namespace

Command add_opbench(CLI::App& cli) {
  auto args = std::make_shared<OpbenchArgs>();
  CLI::App* cmd =
      cli.add_subcommand("opbench", "GPU time of every op at GPT-2 small shapes (timestamps)");
  cmd->add_option("--device", args->device, "device index or name (default: first GPU)");
  cmd->add_option("--precision", args->precision, "weight storage")
      ->check(CLI::IsMember({"f16", "f32"}));
  cmd->add_option("-r,--repeats", args->repeats, "timed calls per op")->check(whole_number(1, 1000));
  cmd->add_option("-p,--prefill", args->prefill, "prefill tokens")->check(whole_number(2, 1024));
  cmd->add_option("--kernels", args->kernels,
                  "the kernel set whose Auto kernels run: auto, gpu or cpu (default: "
                  "GPT2VK_KERNELS, else auto)")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  cmd->add_option("--only", args->only, "time only the ops whose name contains this");
  return {cmd, [args] { return opbench(*args); }};
}

}  // namespace app
