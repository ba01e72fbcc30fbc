#include "model/gpu/attention.h"

#include <algorithm>
#include <cmath>

#include "shaders/attention.h"
#include "vk/check.h"

namespace gpu {
namespace {

// Score slots per chunk at most: 8 KiB covers GPT-2's n_ctx = 1024 (and 2048) in one pass while
// leaving shared memory for other workgroups on the same core; longer caches take more chunks.
constexpr uint32_t kMaxChunk = 2048;

// The texel kernel's shape: workgroups of kTexelLanes invocations (llvmpipe's SIMD width, so a
// workgroup is one SIMD group), kTexelQueries queries per invocation in prefill (more reuse of
// each key read, but more registers and more masked work at the causal edge: 4 measured best for
// GPT-2 small), keys in blocks of kTexelKeys between rescales of the running sums.
constexpr uint32_t kTexelLanes = 8, kTexelQueries = 4, kTexelKeys = 4;
// Fewer queries than this split each query's keys over a workgroup instead.
constexpr uint32_t kTexelSplitBelow = 16;

std::string str(uint64_t v) {
  return std::to_string(v);
}

void check_shapes(const vkr::BufferSpan& out, const vkr::BufferSpan& q, uint32_t q_stride,
                  const vkr::BufferSpan& k_cache, const vkr::BufferSpan& v_cache, uint32_t T,
                  uint32_t L, uint32_t C, uint32_t H, bool causal) {
  if (T == 0 || L == 0 || C == 0)
    throw vkr::Error("attention: T=" + str(T) + ", L=" + str(L) + " and C=" + str(C) +
                     " must all be positive");
  if (H == 0 || C % H != 0)
    throw vkr::Error("attention: C=" + str(C) + " is not a multiple of H=" + str(H) + " heads");
  if (causal && T > L)
    throw vkr::Error("attention: causal queries are the last T of L positions, but T=" + str(T) +
                     " > L=" + str(L));
  if (q_stride < C)
    throw vkr::Error("attention: q_stride=" + str(q_stride) + " is less than C=" + str(C));
  const uint64_t row_bytes = uint64_t{C} * sizeof(float);
  for (const vkr::BufferSpan* cache : {&k_cache, &v_cache})
    if (cache->size < L * row_bytes)
      throw vkr::Error("attention: L=" + str(L) + " keys, but the " +
                       (cache == &k_cache ? "k_cache" : "v_cache") + " holds only " +
                       str(cache->size / row_bytes) + " rows of C=" + str(C));
  require_elements("attention", "out", out, uint64_t{T} * C);
  require_elements("attention", "q", q, uint64_t{T - 1} * q_stride + C);
}

// Workgroups for `blocks` query blocks of H heads: x = block (folded into z past the device
// limit), y = head.
vkr::Groups groups(const vkr::DeviceCaps& caps, uint32_t blocks, uint32_t H) {
  const uint32_t gx = std::min(blocks, caps.max_workgroup_count[0]);
  const uint32_t gz = (blocks + gx - 1) / gx;
  if (H > caps.max_workgroup_count[1] || gz > caps.max_workgroup_count[2])
    throw vkr::Error("attention: " + str(blocks) + " query blocks of H=" + str(H) +
                     " heads exceed this device's workgroup-count limits");
  return {gx, H, gz};
}

// The portable kernel: one workgroup per (query, head), keys in chunks of shared-memory scores.
void dispatch_portable(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
                       const vkr::BufferSpan& q, uint32_t q_stride, const vkr::BufferSpan& k_cache,
                       const vkr::BufferSpan& v_cache, uint32_t T, uint32_t L, uint32_t C,
                       uint32_t H, const push::AttentionPush& push) {
  const vkr::DeviceCaps& caps = k.device().caps();
  const uint32_t D = C / H;
  const uint32_t wg = default_workgroup(caps);
  // Shared memory holds CHUNK scores, WG reduction slots and the D-float query slice.
  const uint32_t budget = std::min(16384u, caps.max_shared_memory) / uint32_t{sizeof(float)};
  if (budget < wg + D + 1)
    throw vkr::Error("attention: head dim D=" + str(D) + " needs " +
                     str((wg + D + 1) * sizeof(float)) + " bytes of shared memory; device '" +
                     caps.name + "' allows " + str(budget * sizeof(float)));
  uint32_t chunk = std::min(budget - wg - D, kMaxChunk);
  if (chunk > wg) chunk -= chunk % wg;  // whole rounds of the score loop
  const uint32_t dpt = (D + wg - 1) / wg;
  const vkr::Pipeline& p = k.get("attention", {{wg, 1, 1}, {D, chunk, dpt}});
  const uint64_t row_bytes = uint64_t{C} * sizeof(float);
  // Bind only what is read or written: the first L cache rows (same offset, so still aligned).
  rec.dispatch(
      p,
      {out.sub(0, T * row_bytes), q.sub(0, (uint64_t{T - 1} * q_stride + C) * sizeof(float)),
       k_cache.sub(0, L * row_bytes), v_cache.sub(0, L * row_bytes)},
      push, groups(caps, T, H));
}

// Why the texel kernel cannot run this call on this device; empty when it can.
std::string texel_unsupported(const vkr::DeviceCaps& caps, const vkr::BufferSpan& q,
                              uint32_t q_stride, const vkr::BufferSpan& k_cache,
                              const vkr::BufferSpan& v_cache, uint32_t T, uint32_t L, uint32_t C,
                              uint32_t H) {
  const uint32_t D = C / H;
  if (!caps.storage_texel_buffers) return "no rgba32f storage texel buffers";
  if (D % 4 != 0 || D > kAttentionTexelMaxD)
    return "head dim D=" + str(D) + " is not a multiple of 4 up to " + str(kAttentionTexelMaxD);
  if (q_stride % 4 != 0) return "q_stride=" + str(q_stride) + " is not a multiple of 4";
  const uint64_t align = std::max(binding_alignment(caps), caps.texel_buffer_alignment);
  if (q.offset % align != 0 || k_cache.offset % align != 0 || v_cache.offset % align != 0)
    return "q or a cache is not aligned to minTexelBufferOffsetAlignment " + str(align);
  const uint64_t texels =
      std::max(uint64_t{T - 1} * q_stride + C, uint64_t{L} * C) / 4;  // q's and a cache's
  if (texels > caps.max_texel_buffer_elements)
    return "q or the caches span " + str(texels) + " texels, over maxTexelBufferElements " +
           str(caps.max_texel_buffer_elements);
  return {};
}

// The texel kernel. Prefill: each invocation owns kTexelQueries queries, all their keys. Fewer
// than kTexelSplitBelow queries (decode): a workgroup per query, whose invocations take every
// lanes-th key and merge in shared memory, so that a single query still fills the SIMD lanes.
void dispatch_texel(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
                    const vkr::BufferSpan& q, uint32_t q_stride, const vkr::BufferSpan& k_cache,
                    const vkr::BufferSpan& v_cache, uint32_t T, uint32_t L, uint32_t C, uint32_t H,
                    const push::AttentionPush& push) {
  const vkr::DeviceCaps& caps = k.device().caps();
  const uint32_t D = C / H;
  // llvmpipe's SIMD width: one workgroup is one SIMD group.
  const uint32_t lanes =
      std::min({kTexelLanes, caps.max_workgroup_invocations, caps.max_workgroup_size[0]});
  const uint32_t budget = std::min(16384u, caps.max_shared_memory) / uint32_t{sizeof(float)};
  uint32_t splits = 1, queries = T < kTexelSplitBelow ? 1 : kTexelQueries, merge = 1;
  if (T < kTexelSplitBelow && lanes * (D + 1) <= budget) {
    splits = lanes;
    merge = lanes * (D + 1);  // each invocation's sum of weights and D partial outputs
  }
  const vkr::Pipeline& p =
      k.get("attention_texel", {{lanes, 1, 1}, {D, splits, queries, kTexelKeys, merge}});
  const uint32_t per_group = lanes / splits * queries;
  const uint64_t row_bytes = uint64_t{C} * sizeof(float);
  rec.dispatch(
      p,
      {out.sub(0, T * row_bytes), q.sub(0, (uint64_t{T - 1} * q_stride + C) * sizeof(float)),
       k_cache.sub(0, L * row_bytes), v_cache.sub(0, L * row_bytes)},
      push, groups(caps, (T + per_group - 1) / per_group, H));
}

}  // namespace

bool attention_prefers_texel(const vkr::DeviceCaps& caps) {
  return caps.type == VK_PHYSICAL_DEVICE_TYPE_CPU;
}

void attention(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
               const vkr::BufferSpan& q, uint32_t q_stride, const vkr::BufferSpan& k_cache,
               const vkr::BufferSpan& v_cache, uint32_t T, uint32_t L, uint32_t C, uint32_t H,
               const AttentionOptions& options) {
  check_shapes(out, q, q_stride, k_cache, v_cache, T, L, C, H, options.causal);
  const vkr::DeviceCaps& caps = k.device().caps();
  const uint32_t D = C / H;
  const float scale = options.scale != 0 ? options.scale : 1.0f / std::sqrt(static_cast<float>(D));
  const push::AttentionPush push{T, L, C, q_stride, options.causal ? 1u : 0u, scale};
  AttentionKernel kernel = options.kernel;
  const std::string why_not =
      kernel == AttentionKernel::Portable
          ? std::string("not asked for")
          : texel_unsupported(caps, q, q_stride, k_cache, v_cache, T, L, C, H);
  if (kernel == AttentionKernel::Auto)
    kernel = why_not.empty() && attention_prefers_texel(caps) ? AttentionKernel::Texel
                                                              : AttentionKernel::Portable;
  if (kernel == AttentionKernel::Texel && !why_not.empty())
    throw vkr::Error("attention: the texel kernel cannot run on device '" + caps.name +
                     "': " + why_not);
  if (kernel == AttentionKernel::Texel)
    dispatch_texel(k, rec, out, q, q_stride, k_cache, v_cache, T, L, C, H, push);
  else
    dispatch_portable(k, rec, out, q, q_stride, k_cache, v_cache, T, L, C, H, push);
}

}  // namespace gpu
