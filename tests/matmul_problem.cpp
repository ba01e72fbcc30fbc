#include "tests/matmul_problem.h"

#include <cmath>

#include "model/ops/cpu/matmul.h"
#include "tests/compare.h"

namespace test {

using model::DType;
using model::gpu::MatmulKernel;
using model::WeightLayout;

std::string describe(const MatmulCase& c, MatmulKernel kernel) {
  const char* res[] = {"", " +residual", " +residual in place"};
  return "matmul T=" + std::to_string(c.T) + " K=" + std::to_string(c.K) +
         " N=" + std::to_string(c.N) + (c.layout == WeightLayout::KN ? " [K,N]" : " [N,K]") +
         (c.interleave ? " interleaved" : "") + (c.dtype == DType::F16 ? " fp16" : " fp32") +
         (c.bias ? " +bias" : "") + " act " + std::to_string(static_cast<int>(c.act)) +
         res[static_cast<int>(c.residual)] +
         (kernel == MatmulKernel::Vector        ? " (vector)"
          : kernel == MatmulKernel::Tiled       ? " (tiled)"
          : kernel == MatmulKernel::VectorTexel ? " (vector texel)"
          : kernel == MatmulKernel::VectorWide  ? " (vector wide)"
          : kernel == MatmulKernel::CoopEmulated ? " (cooperative-matrix emulation)"
          : kernel == MatmulKernel::Coop        ? " (cooperative matrix)"
                                                : " (auto)");
}

std::vector<MatmulCase> gpt2_matmul_shapes() {
  using model::Activation;
  return {
      {1, 768, 2304, true},                                        // c_attn, decode
      {7, 768, 2304, true},                                        // c_attn, short prompt
      {1, 3072, 768, true, Activation::None, Residual::InPlace},   // mlp c_proj, decode
      {2, 64, 5003},                                               // a vocabulary-like N
      {3, 1600, 40, true, Activation::GeluTanh},                   // GPT-2 XL's C as K
      {4, 8, 24, true, Activation::GeluTanh, Residual::Separate},  // C = 8
  };
}

MatmulProblem make_problem(const MatmulCase& c, unsigned seed) {
  MatmulProblem p{c, {}, {}, {}, {}, {}, {}, {}};
  const size_t T = c.T, K = c.K, N = c.N;
  p.x = random_floats(T * K, seed);
  p.w = random_floats(K * N, seed + 1);
  if (c.bias) p.bias = random_floats(N, seed + 2);
  if (c.residual != Residual::None) p.residual = random_floats(T * N, seed + 3);
  return make_problem_from(p);
}

MatmulProblem make_problem_from(const MatmulProblem& from) {
  MatmulProblem p = from;
  const MatmulCase& c = p.c;
  const size_t T = c.T, K = c.K, N = c.N;
  p.w_used = p.w;
  if (c.dtype == DType::F16)
    for (float& v : p.w_used) v = model::cpu::round_to_half(v);
  p.ref.resize(T * N);
  model::cpu::matmul(p.ref.data(), p.x.data(), p.w_used.data(), c.bias ? p.bias.data() : nullptr,
              c.residual != Residual::None ? p.residual.data() : nullptr, T, K, N, c.layout, c.act);
  // The magnitudes, with |x| and |W| through the same reference.
  std::vector<float> ax(p.x), aw(p.w_used), ab(p.bias), ar(p.residual);
  for (auto* v : {&ax, &aw, &ab, &ar})
    for (float& e : *v) e = std::fabs(e);
  p.mag.resize(T * N);
  model::cpu::matmul(p.mag.data(), ax.data(), aw.data(), c.bias ? ab.data() : nullptr,
              c.residual != Residual::None ? ar.data() : nullptr, T, K, N, c.layout);
  return p;
}

vk::BufferSpan upload(const vk::Device& dev, vk::Arena& arena, const void* data, size_t bytes) {
  vk::BufferSpan s = arena.alloc(bytes);
  vk::upload(dev, s, data, bytes);
  return s;
}

namespace {

// W as the device holds it: fp32 or fp16 bits, interleaved when the case asks.
model::gpu::Weight upload_weight(const vk::Device& dev, vk::Arena& arena, const MatmulCase& c,
                          const std::vector<float>& w) {
  std::vector<uint16_t> half;
  const void* data = w.data();
  size_t bytes = w.size() * 4;
  if (c.dtype == DType::F16) {
    half = model::gpu::to_half(w.data(), w.size());
    data = half.data();
    bytes = half.size() * 2;
  }
  if (!c.interleave) return {upload(dev, arena, data, bytes), c.dtype};
  std::vector<uint8_t> packed(model::gpu::interleaved_bytes(c.dtype, c.K, c.N));
  model::gpu::interleave(packed.data(), data, c.layout, c.dtype, c.K, c.N);
  return {upload(dev, arena, packed.data(), packed.size()), c.dtype};
}

}  // namespace

std::vector<float> run_gpu(const vk::Device& dev, const model::gpu::Ops& kernels, const MatmulProblem& p,
                           MatmulKernel kernel, vk::RecorderStats* stats,
                           const model::gpu::MatmulNorm* norm,
                           std::set<std::string>* shaders, uint32_t x_row) {
  const MatmulCase& c = p.c;
  const size_t TN = size_t(c.T) * c.N;
  const size_t w_bytes = model::gpu::interleaved_bytes(DType::F32, c.K, c.N);  // covers every layout
  vk::Arena arena(dev, (p.x.size() + p.bias.size() + 2 * TN) * 4 + w_bytes + 8 * 1024,
                   vk::MemoryKind::Device, "test matmul");
  vk::BufferSpan x = upload(dev, arena, p.x.data(), p.x.size() * 4);
  const model::gpu::Weight w = upload_weight(dev, arena, c, p.w);
  vk::BufferSpan bias = c.bias ? upload(dev, arena, p.bias.data(), p.bias.size() * 4) : x;
  // In place, out starts as the residual; otherwise with NaNs, so unwritten outputs show.
  std::vector<float> init =
      c.residual == Residual::InPlace ? p.residual : std::vector<float>(TN, NAN);
  vk::BufferSpan out = upload(dev, arena, init.data(), TN * 4);
  vk::BufferSpan residual =
      c.residual == Residual::Separate ? upload(dev, arena, p.residual.data(), TN * 4) : out;

  vk::Recorder rec(dev, shaders && dev.caps().timestamps);
  rec.begin();
  model::gpu::matmul(kernels, rec,
                     {.out = out,
                      .x = x,
                      .w = w,
                      .bias = c.bias ? &bias : nullptr,
                      .residual = c.residual != Residual::None ? &residual : nullptr,
                      .T = c.T,
                      .K = c.K,
                      .N = c.N,
                      .options = {.layout = c.interleave ? WeightLayout::Interleaved : c.layout,
                                  .act = c.act,
                                  .kernel = kernel,
                                  .x_row = x_row,
                                  .norm = norm}});
  rec.run();
  if (stats) *stats = rec.stats();
  if (shaders && dev.caps().timestamps)
    for (const vk::DispatchTime& t : rec.timings()) shaders->insert(t.shader);
  std::vector<float> got(TN);
  vk::download(dev, got.data(), out, TN * 4);
  return got;
}

bool matches(const MatmulProblem& p, const std::vector<float>& got, const std::string& what) {
  std::vector<float> g(got.size()), r(got.size());
  for (size_t i = 0; i < got.size(); i++) {
    g[i] = static_cast<float>(got[i] / p.mag[i]);
    r[i] = static_cast<float>(p.ref[i] / p.mag[i]);
  }
  return close(what + ", values / mag", g, r, {kMatmulTol, 0});
}

}  // namespace test
