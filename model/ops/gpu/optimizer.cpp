#include "model/ops/gpu/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "shaders/optimizer.h"
#include "vk/check.h"

namespace model::gpu {
namespace {

uint32_t sum_workgroup(const vk::DeviceCaps& caps) {
  return std::min(default_workgroup(caps), push::GRAD_MAX_WORKGROUP);
}

// Elements of one binding: maxStorageBufferRange in whole aligned blocks.
uint64_t binding_floats(const vk::DeviceCaps& caps) {
  const uint64_t block = binding_alignment(caps);
  return caps.max_storage_buffer_range / block * block / sizeof(float);
}

// The partials of n elements: one per chunk of each binding-sized piece.
uint64_t partials(const vk::DeviceCaps& caps, uint64_t n) {
  const uint64_t piece = binding_floats(caps), chunk = uint64_t{sum_workgroup(caps)} * push::GRAD_CHUNK_PER_INVOCATION;
  return n / piece * vk::ceil_div(piece, chunk) + vk::ceil_div(n % piece, chunk);
}

}  // namespace

uint64_t grad_sum_squares_scratch(const vk::DeviceCaps& caps, std::span<const uint64_t> counts) {
  uint64_t total = 0;
  for (uint64_t n : counts) total += partials(caps, n);
  return std::max<uint64_t>(total, 1);
}

void grad_sum_squares(const Ops& ops, vk::Recorder& rec, const GradSumSquaresArgs& a) {
  const vk::BufferSpan &out = a.out, &scratch = a.scratch;
  const std::span<const vk::BufferSpan> tensors = a.tensors;
  const std::span<const uint64_t> counts = a.counts;
  if (tensors.size() != counts.size())
    fail("grad_sum_squares", std::to_string(tensors.size()) + " tensors but " +
                                 std::to_string(counts.size()) + " sizes");
  const vk::DeviceCaps& caps = ops.device().caps();
  const uint64_t total = grad_sum_squares_scratch(caps, counts);
  require_elements("grad_sum_squares", "out", out, 1);
  require_elements("grad_sum_squares", "scratch", scratch, total);
  for (size_t i = 0; i < tensors.size(); i++)
    require_elements("grad_sum_squares", "a tensor", tensors[i], counts[i]);
  if (total > binding_floats(caps) || total > UINT32_MAX)
    fail("grad_sum_squares", std::to_string(total) + " partial sums exceed one binding");
  const uint32_t wg = sum_workgroup(caps), chunk = wg * push::GRAD_CHUNK_PER_INVOCATION;
  require_shared_memory(caps, "grad_sum_squares", push::GRAD_MAX_WORKGROUP * 4);
  const vk::Pipeline& p = ops.get(vk::Shader::grad_sum_squares, {{wg, 1, 1}, {}});
  const uint64_t align = binding_alignment(caps), piece = binding_floats(caps);
  const vk::BufferSpan all = scratch.sub(0, total * sizeof(float));
  uint64_t at = 0;  // the next partial
  for (size_t i = 0; i < tensors.size(); i++)
    for (uint64_t first = 0; first < counts[i]; first += piece) {
      const uint64_t n = std::min(piece, counts[i] - first), groups = vk::ceil_div(n, chunk);
      const Window dst = window(all, at, groups, sizeof(float), align);
      rec.dispatch(p, {dst.span, tensors[i].sub(first * sizeof(float), n * sizeof(float))},
                   push::GradSumSquaresPush{static_cast<uint32_t>(n), chunk, 0, dst.skip, 1,
                                            static_cast<uint32_t>(groups)},
                   vk::fold_groups(ops.device(), groups, "grad_sum_squares"));
      at += groups;
    }
  // Every partial in one workgroup, in order.
  const auto n = static_cast<uint32_t>(at);
  rec.dispatch(p, {out.sub(0, sizeof(float)), all}, push::GradSumSquaresPush{n, std::max(n, 1u), 0, 0, 0, 1},
               vk::Groups{1, 1, 1});
}

void adamw(const Ops& ops, vk::Recorder& rec, const AdamwArgs& a) {
  const vk::BufferSpan &param = a.param, &m = a.m, &v = a.v, &grad = a.grad;
  const vk::BufferSpan& norm_sq = a.norm_sq;
  const uint64_t n = a.n;
  const OptimizerStep& o = a.options;
  const char* op = o.sgd ? "sgd" : "adamw";
  for (const auto& [name, span] : {std::pair<const char*, const vk::BufferSpan*>{"param", &param},
                                   {"m", &m}, {"v", &v}, {"grad", &grad}})
    require_elements(op, name, *span, n);
  require_elements(op, "norm_sq", norm_sq, 1);
  if (o.step == 0) fail(op, "steps count from 1");
  if (n == 0) return;
  const vk::DeviceCaps& caps = ops.device().caps();
  const double step = static_cast<double>(o.step);
  push::AdamWPush push{0,
                       o.lr,
                       o.beta1,
                       o.beta2,
                       o.eps,
                       o.weight_decay,
                       static_cast<float>(1.0 - std::pow(double(o.beta1), step)),
                       static_cast<float>(1.0 - std::pow(double(o.beta2), step)),
                       o.clip};
  const vk::Pipeline& p =
      ops.get(vk::Shader::adamw, {{default_workgroup(caps), 1, 1}, {o.sgd ? 1u : 0u}});
  const uint64_t piece = binding_floats(caps);
  for (uint64_t first = 0; first < n; first += piece) {
    const uint64_t count = std::min(piece, n - first), off = first * sizeof(float),
                   bytes = count * sizeof(float);
    push.n = static_cast<uint32_t>(count);
    rec.dispatch(p,
                 {param.sub(off, bytes), m.sub(off, bytes), v.sub(off, bytes), grad.sub(off, bytes),
                  norm_sq.sub(0, sizeof(float))},
                 push, vk::groups_for(ops.device(), p, count));
  }
}

}  // namespace model::gpu
