#include "model/ops/gpu/matmul.h"

#include <string>

#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/layernorm.h"
#include "model/ops/gpu/matmul_plan.h"
#include "vk/check.h"

namespace model::gpu {
namespace {

using vk::ceil_div;

bool overlaps(const vk::BufferSpan& a, uint64_t a_bytes, const vk::BufferSpan& b,
              uint64_t b_bytes) {
  return a.buffer == b.buffer && a.offset < b.offset + b_bytes && b.offset < a.offset + a_bytes;
}

void check_arguments(const vk::BufferSpan& out, const vk::BufferSpan& x, const Weight& w,
                     const vk::BufferSpan* bias, const vk::BufferSpan* residual, uint64_t T,
                     uint64_t K, uint64_t N, const MatmulOptions& o) {
  if (T == 0 || K == 0 || N == 0)
    fail("matmul", "T, K and N must be positive (got T = " + std::to_string(T) +
         ", K = " + std::to_string(K) + ", N = " + std::to_string(N) + ")");
  const uint64_t x_row = o.x_row;
  const uint64_t w_bytes = o.layout == WeightLayout::Interleaved
                               ? interleaved_bytes(w.dtype, static_cast<uint32_t>(K),
                                                   static_cast<uint32_t>(N))
                               : ceil_div(K * N * dtype_bytes(w.dtype), 4) * 4;  // fp16 pairs
  require_elements("matmul", "out", out, T * N);
  require_elements("matmul", "x", x, (x_row + T) * K);
  require_elements("matmul", "w", w.span, w_bytes, 1);
  if (bias) require_elements("matmul", "bias", *bias, N);
  if (residual) require_elements("matmul", "residual", *residual, T * N);
  const uint64_t out_bytes = T * N * 4;
  if (overlaps(out, out_bytes, x, (x_row + T) * K * 4)) fail("matmul", "out overlaps x");
  if (overlaps(out, out_bytes, w.span, w_bytes)) fail("matmul", "out overlaps the weight");
  if (bias && overlaps(out, out_bytes, *bias, N * 4)) fail("matmul", "out overlaps bias");
  if (residual && overlaps(out, out_bytes, *residual, out_bytes) && residual->offset != out.offset)
    fail("matmul", "residual overlaps out without being out itself");
}

}  // namespace

void matmul(const Ops& ops, vk::Recorder& rec, const MatmulArgs& a) {
  const vk::BufferSpan &out = a.out, &x = a.x;
  const Weight& w = a.w;
  const vk::BufferSpan *bias = a.bias, *residual = a.residual;
  const uint32_t T = a.T, K = a.K, N = a.N;
  const MatmulOptions& o = a.options;
  check_arguments(out, x, w, bias, residual, T, K, N, o);
  if (o.norm) check_layernorm_args("matmul", K, o.norm->eps, o.norm->kind);
  const MatmulPlan plan = plan_matmul(ops, o, x, w, T, K, N);
  const uint64_t align = plan.align;
  const bool nk = o.layout != WeightLayout::KN;
  const bool interleaved = o.layout == WeightLayout::Interleaved;
  const uint32_t w_row = nk ? K : N, w_rows = nk ? N : K;
  const uint32_t chunks = static_cast<uint32_t>(ceil_div(w_rows, plan.chunk));
  const bool in_place =
      residual && residual->buffer == out.buffer && residual->offset == out.offset;
  if (o.norm && !plan.norm_bindings)
    fail("matmul", "a fused LayerNorm needs interleaved weights or the wide matrix-vector kernel "
                   "(VectorWide, W [N, K])");
  // Rms reads no beta: gamma fills its binding.
  const vk::BufferSpan* beta =
      o.norm ? (o.norm->kind == LayerNormKind::Rms ? &o.norm->gamma : &o.norm->beta) : nullptr;
  if (o.norm) {
    require_elements("matmul", "gamma", o.norm->gamma, K);
    require_elements("matmul", "beta", *beta, K);
    if (o.norm->gamma.offset % plan.align != 0 || beta->offset % plan.align != 0)
      fail("matmul", "gamma and beta must start on the kernel's binding alignment (" +
                     std::to_string(plan.align) + " bytes)");
  }
  if (plan.split_k && in_place && o.act != Activation::None)
    fail("matmul", 
        "W [K, N] is split over K on this device, which cannot keep an in-place residual "
        "under an activation; pass a residual that is not out");

  // Absent bias and residual bindings are filled with x, which the shader then does not read.
  const vk::BufferSpan bs = bias ? bias->sub(0, uint64_t(N) * 4) : x.sub(0, uint64_t(K) * 4);
  for (uint32_t t0 = 0; t0 < T; t0 += plan.rows) {
    const uint32_t rows = std::min(plan.rows, T - t0);
    const uint64_t xs = (uint64_t(o.x_row) + t0) * K, os = uint64_t(t0) * N;  // first elements
    const Window xw = window(x, xs, uint64_t(rows) * K, 4, align);
    const Window ow = window(out, os, uint64_t(rows) * N, 4, align);
    const Window rw = residual ? window(*residual, os, uint64_t(rows) * N, 4, align) : xw;
    for (uint32_t c = 0; c < chunks; c++) {
      const uint32_t r0 = c * plan.chunk, count = std::min(plan.chunk, w_rows - r0);
      // An interleaved chunk is whole blocks of rows, padding included.
      const uint64_t held = interleaved ? ceil_div(count, push::MATMUL_BLOCK_ROWS) *
                                              push::MATMUL_BLOCK_ROWS
                                        : count;
      const Window ww = window(w.span, uint64_t(r0) * w_row, held * w_row,
                               dtype_bytes(w.dtype), align);
      // A chunk of W [N, K] is a whole block of outputs. Chunks of W [K, N] sum into out: the
      // bias goes on the first, the activation on the last, and the residual on the first when
      // there is no activation (so an in-place residual is read before out is overwritten).
      const bool first = nk || c == 0, last = nk || c + 1 == chunks;
      uint32_t flags = first ? 0 : push::MATMUL_ACCUMULATE;
      if (bias && first) flags |= push::MATMUL_BIAS;
      if (residual && (o.act == Activation::None ? first : last)) flags |= push::MATMUL_RESIDUAL;
      if (interleaved) flags |= static_cast<uint32_t>(o.act) << push::MATMUL_ACT_SHIFT;
      const push::MatmulPush p{
          rows,           K,      N,      nk ? 0 : r0, nk ? K : count, nk ? r0 : 0,
          nk ? count : N, xw.skip, ww.skip, ow.skip, rw.skip,         flags,
          o.norm ? o.norm->eps : 0.0f};
      const vk::Pipeline& pipe = last ? *plan.last : *plan.plain;
      const vk::Groups g = matmul_groups(ops.device(), plan, p.n_count, rows);
      rec.set_flops(2.0 * rows * p.n_count * p.k_count);
      if (plan.norm_bindings)  // gamma and beta, or x again where no LayerNorm reads them
        rec.dispatch(pipe, {ow.span, xw.span, ww.span, bs, rw.span,
                            o.norm ? o.norm->gamma.sub(0, uint64_t{K} * 4) : xw.span,
                            beta ? beta->sub(0, uint64_t{K} * 4) : xw.span},
                     p, g);
      else
        rec.dispatch(pipe, {ow.span, xw.span, ww.span, bs, rw.span}, p, g);
    }
  }
}

}  // namespace model::gpu
