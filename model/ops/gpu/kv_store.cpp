#include "model/ops/gpu/kv_store.h"

#include <algorithm>

#include "shaders/kv_store.h"
#include "vk/check.h"

namespace model::gpu {

void kv_store(const Ops& ops, vk::Recorder& rec, const KvStoreArgs& a) {
  const vk::BufferSpan &k_cache = a.k_cache, &v_cache = a.v_cache, &qkv = a.qkv;
  const uint32_t T = a.T, C = a.C, pos = a.pos;
  const vk::BufferSpan* step = a.step;
  const DType cache = a.cache;
  if (T == 0 || C == 0)
    throw vk::Error("kv_store: T=" + std::to_string(T) + " and C=" + std::to_string(C) +
                     " must both be positive");
  const bool f16 = cache == DType::F16;
  if (f16 && C % 2 != 0)  // an invocation writes a whole word: two values of one row
    throw vk::Error("kv_store: an fp16 cache needs an even C, not C = " + std::to_string(C));
  const uint64_t row_bytes = uint64_t{C} * dtype_bytes(cache);
  const uint64_t n_ctx = std::min(k_cache.size, v_cache.size) / row_bytes;
  const uint64_t end = uint64_t{pos} + T;
  if (end > n_ctx)
    throw vk::Error("kv_store: rows " + std::to_string(pos) + ".." + std::to_string(end - 1) +
                     " do not fit the cache of n_ctx = " + std::to_string(n_ctx) +
                     " rows of C = " + std::to_string(C));
  require_elements("kv_store", "qkv", qkv, uint64_t{T} * 3 * C);
  const vk::Pipeline& p =
      ops.get(vk::Shader::kv_store,
              {{default_workgroup(ops.device().caps()), 1, 1}, {static_cast<uint32_t>(cache)}});
  // Only the rows up to the last one written are bound (offset unchanged, so still aligned): a
  // later reader of the cache still gets a barrier, and the binding stays as small as it can.
  // With the position read at run time, the whole caches.
  const uint64_t bound =
      step ? whole_cache_bytes("kv_store", ops.device().caps(), k_cache, v_cache, row_bytes, end)
           : end * row_bytes;
  const vk::BufferSpan q = qkv.sub(0, uint64_t{T} * 3 * C * sizeof(float));
  rec.dispatch(p,
               {k_cache.sub(0, bound), v_cache.sub(0, bound), q, step_binding("kv_store", step, q)},
               push::KvStorePush{T, C, step ? 0 : pos, step ? 1u : 0u},
               vk::groups_for(ops.device(), p, uint64_t{T} * C / (f16 ? 2 : 1)));
}

}  // namespace model::gpu
