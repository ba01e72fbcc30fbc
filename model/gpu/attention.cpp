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

}  // namespace

void attention(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out,
               const vkr::BufferSpan& q, uint32_t q_stride, const vkr::BufferSpan& k_cache,
               const vkr::BufferSpan& v_cache, uint32_t T, uint32_t L, uint32_t C, uint32_t H,
               const AttentionOptions& options) {
  check_shapes(out, q, q_stride, k_cache, v_cache, T, L, C, H, options.causal);
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

  // x = query (folded into z past the device limit), y = head.
  const uint32_t gx = std::min(T, caps.max_workgroup_count[0]);
  const uint32_t gz = (T + gx - 1) / gx;
  if (H > caps.max_workgroup_count[1] || gz > caps.max_workgroup_count[2])
    throw vkr::Error("attention: T=" + str(T) + ", H=" + str(H) +
                     " exceed this device's workgroup-count limits");
  const float scale = options.scale != 0 ? options.scale : 1.0f / std::sqrt(static_cast<float>(D));
  const uint64_t row_bytes = uint64_t{C} * sizeof(float);
  // Bind only what is read or written: the first L cache rows (same offset, so still aligned).
  rec.dispatch(
      p,
      {out.sub(0, T * row_bytes), q.sub(0, (uint64_t{T - 1} * q_stride + C) * sizeof(float)),
       k_cache.sub(0, L * row_bytes), v_cache.sub(0, L * row_bytes)},
      push::AttentionPush{T, L, C, q_stride, options.causal ? 1u : 0u, scale},
      vkr::Groups{gx, H, gz});
}

}  // namespace gpu
