#include "model/gpu/topk.h"

#include <algorithm>

#include "shaders/topk.h"
#include "vk/check.h"

namespace gpu {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw vkr::Error("topk: " + what);
}

uint32_t workgroup(const vkr::DeviceCaps& caps) {
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

Plan plan(const vkr::DeviceCaps& caps, uint32_t V, uint32_t k) {
  // A slice of at least 4k elements shrinks each level at least fourfold; at least 4 per
  // invocation keeps the rounds' barriers from dominating. CPU devices (llvmpipe) run a
  // workgroup's barriers as coroutine switches, which cost far more than the loads: there 64 per
  // invocation (few workgroups, two levels for a vocabulary) took topk k=40 over 50257 logits
  // from ~50 ms to ~7 ms; GPUs keep the many small workgroups they fill themselves with.
  const uint32_t W = workgroup(caps);
  const uint32_t per = caps.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 64u : 4u;
  const uint64_t align = binding_alignment(caps);
  auto aligned = [&](uint64_t bytes) { return (bytes + align - 1) / align * align; };
  Plan pl;
  pl.slice = W * std::max(per, (4 * k + W - 1) / W);
  for (uint64_t n = V;;) {
    Level l;
    l.n = static_cast<uint32_t>(n);
    l.groups = static_cast<uint32_t>((n + pl.slice - 1) / pl.slice);
    if (l.groups > 1) {
      const uint64_t bytes = aligned(uint64_t{l.groups} * k * 4);
      l.values_at = pl.scratch_bytes;
      l.ids_at = pl.scratch_bytes + bytes;
      pl.scratch_bytes += 2 * bytes;
    }
    pl.levels.push_back(l);
    if (l.groups == 1) return pl;
    n = uint64_t{l.groups} * k;
  }
}

void check_args(const vkr::DeviceCaps& caps, uint32_t V, uint32_t k) {
  if (V == 0) fail("no logits (V = 0)");
  if (k == 0) fail("k must be at least 1");
  if (k > V) fail("k = " + std::to_string(k) + " exceeds V = " + std::to_string(V));
  if (k > kTopkMax)
    fail("k = " + std::to_string(k) + " exceeds the supported maximum " + std::to_string(kTopkMax));
  const uint32_t shared =
      (2 * push::TOPK_MAX_WORKGROUP + 2 * push::TOPK_MAX_WORKGROUP / push::TOPK_CHUNK) * 4;
  if (caps.max_shared_memory < shared)
    fail("needs " + std::to_string(shared) + " bytes of shared memory, device '" + caps.name +
         "' has " + std::to_string(caps.max_shared_memory));
}

}  // namespace

size_t topk_scratch_bytes(const vkr::DeviceCaps& caps, uint32_t V, uint32_t k) {
  check_args(caps, V, k);
  return static_cast<size_t>(plan(caps, V, k).scratch_bytes);
}

void topk(vkr::Kernels& kernels, vkr::Recorder& rec, const vkr::BufferSpan& out_ids,
          const vkr::BufferSpan& out_values, const vkr::BufferSpan& logits,
          const vkr::BufferSpan& scratch, uint32_t V, uint32_t k) {
  const vkr::DeviceCaps& caps = kernels.device().caps();
  check_args(caps, V, k);
  require_elements("topk", "out_ids", out_ids, k, sizeof(int32_t));
  require_elements("topk", "out_values", out_values, k);
  require_elements("topk", "logits", logits, V);
  const Plan pl = plan(caps, V, k);
  if (pl.scratch_bytes > 0) {
    require_elements("topk", "scratch", scratch, pl.scratch_bytes, 1);
    if (scratch.offset % binding_alignment(caps) != 0)
      fail("scratch starts at offset " + std::to_string(scratch.offset) +
           ", not a multiple of minStorageBufferOffsetAlignment");
  }

  const uint32_t W = workgroup(caps);
  vkr::BufferSpan in_values = logits, in_ids = logits;  // the first level reads no ids
  for (size_t i = 0; i < pl.levels.size(); i++) {
    const Level& l = pl.levels[i];
    const bool first = i == 0, last = i + 1 == pl.levels.size();
    const uint64_t bytes = uint64_t{l.groups} * k * 4;
    vkr::BufferSpan ids_out = last ? out_ids : scratch.sub(l.ids_at, bytes);
    vkr::BufferSpan values_out = last ? out_values : scratch.sub(l.values_at, bytes);
    const vkr::Pipeline& p = kernels.get("topk", {{W, 1, 1}, {first ? 1u : 0u, last ? 1u : 0u}});
    rec.dispatch(p, {ids_out, values_out, in_values, in_ids},
                 push::TopkPush{l.n, k, pl.slice, l.groups},
                 vkr::fold_groups(kernels.device(), l.groups, "topk"));
    in_values = values_out;
    in_ids = ids_out;
  }
}

void argmax(vkr::Kernels& kernels, vkr::Recorder& rec, const vkr::BufferSpan& out_id,
            const vkr::BufferSpan& out_value, const vkr::BufferSpan& logits,
            const vkr::BufferSpan& scratch, uint32_t V) {
  topk(kernels, rec, out_id, out_value, logits, scratch, V, 1);
}

}  // namespace gpu
