#include "model/ops/gpu/matmul_backward.h"

#include <algorithm>
#include <string>
#include <vector>

#include "model/ops/gpu/matmul.h"
#include "shaders/matmul_backward.h"
#include "model/ops/gpu/choose.h"
#include "vk/check.h"

namespace model::gpu {

void matmul_backward(const Ops& ops, vk::Recorder& rec, const MatmulBackwardArgs& args) {
  const vk::BufferSpan *dx = args.dx, *dbias = args.dbias;
  const vk::BufferSpan &dw = args.dw, &dout = args.dout, &x = args.x;
  const Weight& w = args.w;
  const uint32_t T = args.T, K = args.K, N = args.N;
  const Weight* w_t = args.w_t;
  const char* op = "matmul_backward";
  if (w.dtype != DType::F32 || (w.layout != WeightLayout::KN && w.layout != WeightLayout::NK))
    fail(op, "the weight must be fp32 in the KN or NK layout");
  if (K == 0 || N == 0) fail(op, "K and N must be positive");
  require_elements(op, "dw", dw, uint64_t{K} * N);
  require_elements(op, "w", w.span, uint64_t{K} * N);
  require_elements(op, "dout", dout, uint64_t{T} * N);
  require_elements(op, "x", x, uint64_t{T} * K);
  if (dbias) require_elements(op, "dbias", *dbias, N);
  if (w_t && w_t->dtype != DType::F32) fail(op, "the packed W^T must be fp32");
  if (T == 0) return;
  if (dx) {
    // dx[t, k] = sum_n dout[t, n] W(k, n): a matmul over n, with W's layout swapped ([K, N] read
    // as rows of outputs k, or [N, K] as [K', N'] = [N, K]).
    const Weight wt = w_t ? *w_t
                          : Weight{w.span, DType::F32,
                                   w.layout == WeightLayout::KN ? WeightLayout::NK : WeightLayout::KN};
    matmul(ops, rec,
           {.out = *dx, .x = dout, .w = wt, .T = T, .K = N, .N = K, .options = {wt.layout}});
  }
  const vk::DeviceCaps& caps = ops.device().caps();
  const uint64_t dw_bytes = uint64_t{K} * N * sizeof(float);
  if (dw_bytes > caps.max_storage_buffer_range)
    fail(op, "dw's " + std::to_string(dw_bytes) + " bytes exceed what one binding may hold");
  if (caps.max_workgroup_invocations < 128 || caps.max_workgroup_size[0] < 16 ||
      caps.max_workgroup_size[1] < 8)
    fail(op, "needs workgroups of 16 x 8 invocations");
  require_shared_memory(caps, op, 2 * push::MATMUL_BACKWARD_ROWS * push::MATMUL_BACKWARD_TILE * 4);
  // Rows per dispatch: as many as one binding of x and of dout holds, less the alignment slack.
  const uint64_t align = binding_alignment(caps), row_bytes = uint64_t{std::max(K, N)} * 4;
  if (row_bytes + align > caps.max_storage_buffer_range)
    fail(op, "a row of dout or x exceeds what one binding may hold");
  const auto rows = static_cast<uint32_t>(
      std::min<uint64_t>(T, (caps.max_storage_buffer_range - align) / row_bytes));
  const uint32_t tile = push::MATMUL_BACKWARD_TILE;
  const uint32_t layout = w.layout == WeightLayout::KN ? push::MATMUL_KN : push::MATMUL_NK;
  const vk::Pipeline& grad = ops.get(vk::Shader::matmul_backward, {{16, 8, 1}, {layout, 0u}});
  const vk::Pipeline& bias = ops.get(vk::Shader::matmul_backward, {{16, 8, 1}, {layout, 1u}});
  // The texel kernel where choose.h prefers it and the shape allows it: 4 x 8 blocks of outputs,
  // rows of x and dout in whole texels, within one texel view.
  const uint64_t texel_align = texel_binding_alignment(caps);
  const bool texel =
      matmul_backward_texel(ops.policy()) && caps.storage_texel_buffers && K % 4 == 0 &&
      N % 8 == 0 && x.offset % texel_align == 0 && dout.offset % texel_align == 0 &&
      uint64_t{rows} * std::max(K, N) / 4 + texel_align <= caps.max_texel_buffer_elements;
  const vk::Pipeline* grad_texel = texel ? &ops.get(vk::Shader::matmul_backward_texel,
                                                    {{default_workgroup(caps), 1, 1}, {layout}})
                                         : nullptr;
  const vk::BufferSpan dw_all = dw.sub(0, dw_bytes);
  const vk::BufferSpan db = dbias ? dbias->sub(0, uint64_t{N} * 4) : dw_all;
  for (uint32_t t0 = 0; t0 < T; t0 += rows) {
    const uint32_t n = std::min(rows, T - t0);
    const uint64_t a = texel ? texel_align : align;
    const Window xw = window(x, uint64_t{t0} * K, uint64_t{n} * K, sizeof(float), a);
    const Window dw_ = window(dout, uint64_t{t0} * N, uint64_t{n} * N, sizeof(float), a);
    const push::MatmulBackwardPush push{n, K, N, xw.skip, dw_.skip};
    const std::vector<vk::BufferSpan> bindings{dw_all, db, dw_.span, xw.span};
    if (texel) {
      rec.dispatch(*grad_texel, {dw_all, dw_.span, xw.span}, push,
                   vk::groups_for(ops.device(), *grad_texel, uint64_t{K / 4} * (N / 8)));
    } else {
      if (uint64_t(vk::ceil_div(N, tile)) > caps.max_workgroup_count[0] ||
          uint64_t(vk::ceil_div(K, tile)) > caps.max_workgroup_count[1])
        fail(op, "the grid of 64 x 64 tiles exceeds the device's workgroup counts");
      rec.dispatch(grad, bindings, push,
                   vk::Groups{static_cast<uint32_t>(vk::ceil_div(N, tile)),
                              static_cast<uint32_t>(vk::ceil_div(K, tile)), 1});
    }
    if (dbias)
      rec.dispatch(bias, bindings, push,
                   vk::Groups{static_cast<uint32_t>(vk::ceil_div(N, 128)), 1, 1});
  }
}

}  // namespace model::gpu
