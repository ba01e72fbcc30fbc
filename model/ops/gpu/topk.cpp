#include "model/ops/gpu/topk.h"

#include <algorithm>

#include "shaders/topk.h"
#include "vk/check.h"

namespace model::gpu {
namespace {

uint32_t workgroup(const vk::DeviceCaps& caps) {
  return std::min(default_workgroup(caps), push::TOPK_MAX_WORKGROUP);
}

// One level of the tree: `groups` workgroups reduce n inputs to groups * k candidates, written to
// the scratch at values_at and ids_at unless this is the last level (one workgroup).
struct Level {
  uint32_t n = 0, groups = 0;
  uint64_t values_at = 0, ids_at = 0;
};

struct Plan {
  uint32_t slice = 0;
  std::vector<Level> levels;
  uint64_t scratch_bytes = 0;
};

Plan plan(const vk::DeviceCaps& caps, uint32_t per, uint32_t V, uint32_t k) {
  // A slice of at least 4k elements shrinks each level at least fourfold; at least
  // topk_per_invocation per invocation keeps the rounds' barriers from dominating (the kernel
  // policy: few large workgroups on CPU devices, many small ones on GPUs).
  const uint32_t W = workgroup(caps);
  const uint64_t align = binding_alignment(caps);
  Plan pl;
  pl.slice = W * std::max<uint32_t>(per, static_cast<uint32_t>(vk::ceil_div(4 * k, W)));
  for (uint64_t n = V;;) {
    Level l;
    l.n = static_cast<uint32_t>(n);
    l.groups = static_cast<uint32_t>(vk::ceil_div(n, pl.slice));
    if (l.groups > 1) {
      const uint64_t bytes = vk::align_up(uint64_t{l.groups} * k * 4, align);
      l.values_at = pl.scratch_bytes;
      l.ids_at = pl.scratch_bytes + bytes;
      pl.scratch_bytes += 2 * bytes;
    }
    pl.levels.push_back(l);
    if (l.groups == 1) return pl;
    n = uint64_t{l.groups} * k;
  }
}

void check_args(const vk::DeviceCaps& caps, uint32_t V, uint32_t k) {
  if (V == 0) fail("topk", "no logits (V = 0)");
  if (k == 0) fail("topk", "k must be at least 1");
  if (k > V) fail("topk", "k = " + std::to_string(k) + " exceeds V = " + std::to_string(V));
  if (k > kTopkMax)
    fail("topk", "k = " + std::to_string(k) + " exceeds the supported maximum " + std::to_string(kTopkMax));
  const uint32_t shared =
      (2 * push::TOPK_MAX_WORKGROUP + 2 * push::TOPK_MAX_WORKGROUP / push::TOPK_CHUNK) * 4;
  if (caps.max_shared_memory < shared)
    fail("topk", "needs " + std::to_string(shared) + " bytes of shared memory, device '" + caps.name +
         "' has " + std::to_string(caps.max_shared_memory));
}

}  // namespace

size_t topk_scratch_bytes(const Ops& ops, uint32_t V, uint32_t k) {
  check_args(ops.caps(), V, k);
  return static_cast<size_t>(plan(ops.caps(), ops.policy().topk_per_invocation, V, k).scratch_bytes);
}

void topk(const Ops& ops, vk::Recorder& rec, const TopkArgs& a) {
  const vk::BufferSpan &out_ids = a.out_ids, &out_values = a.out_values, &logits = a.logits;
  const vk::BufferSpan& scratch = a.scratch;
  const uint32_t V = a.V, k = a.k;
  const vk::DeviceCaps& caps = ops.device().caps();
  check_args(caps, V, k);
  require_elements("topk", "out_ids", out_ids, k, sizeof(int32_t));
  require_elements("topk", "out_values", out_values, k);
  require_elements("topk", "logits", logits, V);
  const Plan pl = plan(ops.device().caps(), ops.policy().topk_per_invocation, V, k);
  if (pl.scratch_bytes > 0) {
    require_elements("topk", "scratch", scratch, pl.scratch_bytes, 1);
    if (scratch.offset % binding_alignment(caps) != 0)
      fail("topk", "scratch starts at offset " + std::to_string(scratch.offset) +
           ", not a multiple of minStorageBufferOffsetAlignment");
  }

  const uint32_t W = workgroup(caps);
  vk::BufferSpan in_values = logits, in_ids = logits;  // the first level reads no ids
  for (size_t i = 0; i < pl.levels.size(); i++) {
    const Level& l = pl.levels[i];
    const bool first = i == 0, last = i + 1 == pl.levels.size();
    const uint64_t bytes = uint64_t{l.groups} * k * 4;
    vk::BufferSpan ids_out = last ? out_ids : scratch.sub(l.ids_at, bytes);
    vk::BufferSpan values_out = last ? out_values : scratch.sub(l.values_at, bytes);
    const vk::Pipeline& p = ops.get(vk::Shader::topk, {{W, 1, 1}, {first ? 1u : 0u, last ? 1u : 0u}});
    rec.dispatch(p, {ids_out, values_out, in_values, in_ids},
                 push::TopkPush{l.n, k, pl.slice, l.groups},
                 vk::fold_groups(ops.device(), l.groups, "topk"));
    in_values = values_out;
    in_ids = ids_out;
  }
}

void argmax(const Ops& ops, vk::Recorder& rec, const ArgmaxArgs& a) {
  topk(ops, rec,
       {.out_ids = a.out_id,
        .out_values = a.out_value,
        .logits = a.logits,
        .scratch = a.scratch,
        .V = a.V,
        .k = 1});
}

}  // namespace model::gpu
