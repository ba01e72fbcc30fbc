#include "model/ops/gpu/coop_check.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "vk/memory.h"
#include "vk/recorder.h"

namespace model::gpu {

std::string check_coop_matrix(const Ops& k, MatmulKernel kernel) {
  const vk::Device& dev = k.device();
  // Ragged against every tile (70 rows past a 64-row tile, K past a 16-step, N past a 64-wide
  // tile), fp16 W [N, K], bias, GELU and a residual: every staging path and epilogue step.
  constexpr uint32_t T = 70, K = 100, N = 90;
  uint32_t state = 2024;
  const auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 8388608.0f - 1.0f;  // [-1, 1)
  };
  std::vector<float> x(T * K), w(N * K), b(N), r(T * N);
  for (auto* v : {&x, &w, &b, &r})
    for (float& e : *v) e = next();
  const std::vector<uint16_t> half = to_half(w.data(), w.size());
  const uint64_t out_bytes = uint64_t{T} * N * 4;
  std::vector<float> got(T * N), want(T * N);
  try {  // a pipeline the driver cannot build fails the test too, not the model's load
    vk::Arena arena(dev, (x.size() + b.size() + r.size()) * 4 + half.size() * 2 + 2 * out_bytes +
                             8 * dev.caps().storage_buffer_alignment + 1024,
                    vk::MemoryKind::Device, "cooperative-matrix self-test");
    const auto put = [&](const void* data, uint64_t bytes) {
      vk::BufferSpan s = arena.alloc(bytes);
      vk::upload(dev, s, data, bytes);
      return s;
    };
    const vk::BufferSpan xs = put(x.data(), x.size() * 4), bs = put(b.data(), b.size() * 4),
                         rs = put(r.data(), r.size() * 4);
    const Weight ws{put(half.data(), half.size() * 2), DType::F16, WeightLayout::NK};
    const vk::BufferSpan coop = arena.alloc(out_bytes), tiled = arena.alloc(out_bytes);
    vk::Recorder rec(dev);
    rec.begin();
    const auto args = [&](const vk::BufferSpan& out, MatmulKernel kind) {
      return MatmulArgs{.out = out,
                        .x = xs,
                        .w = ws,
                        .bias = &bs,
                        .residual = &rs,
                        .T = T,
                        .K = K,
                        .N = N,
                        .options = {WeightLayout::NK, Activation::GeluTanh, kind}};
    };
    matmul(k, rec, args(coop, kernel));
    matmul(k, rec, args(tiled, MatmulKernel::Tiled));
    rec.run();
    vk::download(dev, got.data(), coop, out_bytes);
    vk::download(dev, want.data(), tiled, out_bytes);
  } catch (const vk::Error& e) {
    if (dev.lost()) throw;  // nothing else would run either
    return "the cooperative-matrix self-test could not run on device '" + dev.caps().name +
           "' (" + e.what() + "): prompts take the scalar tiles";
  }
  // x rounded to fp16 moves each product by at most 2^-11 of its size; the sums' order by less.
  // 3e-3 of the row's magnitude (sum |x| |w| + |b| + |r|) is the emulation test's tolerance.
  std::string note;
  for (uint32_t t = 0; t < T && note.empty(); t++)
    for (uint32_t n = 0; n < N && note.empty(); n++) {
      double mag = std::fabs(b[n]) + std::fabs(r[size_t{t} * N + n]);
      for (uint32_t i = 0; i < K; i++)
        mag += std::fabs(double{x[size_t{t} * K + i]}) * std::fabs(double{w[size_t{n} * K + i]});
      const double diff = std::fabs(double{got[size_t{t} * N + n]} - double{want[size_t{t} * N + n]});
      if (!(diff <= 3e-3 * mag))
        note = "the cooperative-matrix matmul on device '" + dev.caps().name + "' gave " +
               std::to_string(got[size_t{t} * N + n]) + " where the scalar tiles gave " +
               std::to_string(want[size_t{t} * N + n]) + " (row " + std::to_string(t) +
               ", output " + std::to_string(n) + "): prompts take the scalar tiles";
    }
  return note;
}

Ops checked_ops(const vk::Device& device) {
  Ops ops(device);
  if (!ops.policy().coop_matrix) return ops;
  const std::string note = check_coop_matrix(ops);
  if (note.empty()) return ops;
  KernelPolicy without = ops.policy();
  without.coop_matrix = false;
  return Ops(device.kernels(), without, note);
}

}  // namespace model::gpu
