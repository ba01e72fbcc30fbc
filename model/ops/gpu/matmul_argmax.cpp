#include "model/ops/gpu/matmul_argmax.h"

#include <string>

#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/matmul_plan.h"
#include "vk/check.h"

namespace model::gpu {

using vk::ceil_div;

uint32_t matmul_argmax_partials(uint32_t N) {
  return static_cast<uint32_t>(ceil_div(N, push::MATMUL_BLOCK_ROWS) * 8);
}

void matmul_argmax(const Ops& ops, vk::Recorder& rec, const MatmulArgmaxArgs& a) {
  const vk::BufferSpan &partials = a.partials, &x = a.x;
  const Weight& w = a.w;
  const uint32_t K = a.K, N = a.N, x_row = a.x_row;
  const MatmulOptions o{WeightLayout::Interleaved, Activation::None, MatmulKernel::Auto, x_row};
  if (K == 0 || N == 0) fail("matmul", "K and N must be positive");
  if (N > (1u << 24)) fail("matmul", "argmax ids travel as floats, exact up to 2^24 outputs");
  require_elements("matmul argmax", "partials", partials, 2 * uint64_t{matmul_argmax_partials(N)});
  require_elements("matmul argmax", "x", x, (uint64_t{x_row} + 1) * K);
  require_elements("matmul argmax", "w", w.span, interleaved_bytes(w.dtype, K, N), 1);
  const MatmulPlan plan = plan_matmul(ops, o, x, w, 1, K, N, true);
  const Window xw = window(x, uint64_t{x_row} * K, K, 4, plan.align);
  const Window pw = window(partials, 0, 2 * uint64_t{matmul_argmax_partials(N)}, 4, plan.align);
  for (uint32_t r0 = 0; r0 < N; r0 += plan.chunk) {
    const uint32_t count = std::min(plan.chunk, N - r0);
    const uint64_t held = ceil_div(count, push::MATMUL_BLOCK_ROWS) * push::MATMUL_BLOCK_ROWS;
    const Window ww = window(w.span, uint64_t{r0} * K, held * K, dtype_bytes(w.dtype), plan.align);
    const push::MatmulPush p{1, K, N, 0, K, r0, count, xw.skip, ww.skip, pw.skip, 0, 0, 0.0f};
    const vk::BufferSpan unused = xw.span;  // bias, residual, gamma, beta: not read
    rec.set_flops(2.0 * count * K);
    rec.dispatch(*plan.last, {pw.span, xw.span, ww.span, unused, unused, unused, unused}, p,
                 matmul_groups(ops.device(), plan, count, 1));
  }
}

std::pair<int32_t, float> argmax_of_partials(const float* partials, uint32_t count) {
  int32_t best_id = -1;
  float best = 0;
  for (uint32_t i = 0; i < count; i++) {
    const float v = partials[2 * i];
    const auto id = static_cast<int32_t>(partials[2 * i + 1]);
    if (id < 0) continue;
    if (best_id < 0 || v > best || (v == best && id < best_id)) {
      best = v;
      best_id = id;
    }
  }
  return {best_id, best};
}

}  // namespace model::gpu
