#include "model/ops/gpu/embedding.h"

#include <algorithm>

#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/matmul.h"
#include "vk/check.h"

namespace model::gpu {
namespace {

// Bytes a weight of n elements occupies: fp16 pairs round up to a whole word.
uint64_t weight_bytes(DType t, uint64_t n) {
  return t == DType::F16 ? (n + 1) / 2 * 4 : n * 4;
}

void check_weight(const char* what, const Weight& w, uint64_t bytes, uint64_t align) {
  require_elements("embedding", what, w.span, bytes, 1);
  if (w.span.offset % align != 0)
    fail("embedding", std::string(what) + " starts at offset " + std::to_string(w.span.offset) +
         ", not a multiple of minStorageBufferOffsetAlignment " + std::to_string(align));
}

// embedding() and embedding_batch(): `dynamic` is EmbeddingPush::dynamic_pos (0 without step).
void embed(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& out, const vk::BufferSpan& ids,
           const Weight& wte, const Weight* wpe, uint32_t T, uint32_t C, uint32_t V, uint32_t n_pos,
           uint32_t pos_offset, PositionKind position, bool wte_interleaved,
           const vk::BufferSpan* step, uint32_t dynamic, uint32_t period,
           const vk::BufferSpan* types = nullptr, const Weight* wtt = nullptr,
           uint32_t n_types = 0, float scale = 1.0f) {
  const vk::DeviceCaps& caps = k.device().caps();
  const uint64_t align = binding_alignment(caps);
  if (T == 0 || C == 0 || V == 0) fail("embedding", "T, C and V must be positive");
  if (uint64_t{T} * C > UINT32_MAX) fail("embedding", "T * C exceeds 2^32 elements");
  require_elements("embedding", "out", out, uint64_t{T} * C);
  require_elements("embedding", "ids", ids, T, sizeof(int32_t));
  if (wte_interleaved && C % (16 / dtype_bytes(wte.dtype)) != 0)
    fail("embedding", "an interleaved wte needs C in whole 16-byte texels (C = " + std::to_string(C) + ")");
  const uint64_t wte_bytes = wte_interleaved ? interleaved_bytes(wte.dtype, C, V)
                                             : weight_bytes(wte.dtype, uint64_t{V} * C);
  check_weight("wte", wte, wte_bytes, align);

  if (period != 0 && (T % period != 0 || (step && dynamic != 2)))
    fail("embedding", "T=" + std::to_string(T) + " is not whole sequences of period " +
                          std::to_string(period) + " (or a period with a run-time position)");
  const uint32_t span = period != 0 ? period : T;  // the positions the tokens take
  // With the position read at run time, the push holds 0 and wpe is bound from row 0 on.
  push::EmbeddingPush push{T, C, V, step ? 0 : pos_offset, 0, V, 0, 0, dynamic, span, n_types,
                           scale};
  if (!types != !wtt) fail("embedding", "token types need both the types and the wtt table");
  if (types) {
    if (n_types == 0) fail("embedding", "a token-type table needs n_types >= 1");
    require_elements("embedding", "types", *types, T, sizeof(int32_t));
    check_weight("wtt", *wtt, weight_bytes(wtt->dtype, uint64_t{n_types} * C), align);
    if (uint64_t{n_types} * C * dtype_bytes(wtt->dtype) > caps.max_storage_buffer_range)
      fail("embedding", "the token-type table exceeds maxStorageBufferRange");
  }
  Window pos{ids, 0};  // an unused binding still needs a buffer: the ids are always in range
  if (position == PositionKind::Learned) {
    if (!wpe) fail("embedding", "learned positions need a wpe table");
    if (uint64_t{pos_offset} + span > n_pos)
      fail("embedding", "positions " + std::to_string(pos_offset) + ".." + std::to_string(pos_offset + span - 1) +
           " exceed the " + std::to_string(n_pos) + " rows of wpe");
    check_weight("wpe", *wpe, weight_bytes(wpe->dtype, uint64_t{n_pos} * C), align);
    pos = step ? window(wpe->span, 0, uint64_t{n_pos} * C, dtype_bytes(wpe->dtype), align)
               : window(wpe->span, uint64_t{pos_offset} * C, uint64_t{span} * C,
                        dtype_bytes(wpe->dtype), align);
    push.wpe_skip = pos.skip;
  }

  // Vocabulary rows per dispatch: as many as one binding may hold, leaving room for the aligned
  // start (up to align bytes before row v_begin) and the round-up to a whole word; whole blocks
  // of rows when interleaved.
  const uint64_t row_bytes = uint64_t{C} * dtype_bytes(wte.dtype);
  const uint64_t range = caps.max_storage_buffer_range;
  const uint64_t block = wte_interleaved ? push::MATMUL_BLOCK_ROWS : 1;
  const uint64_t rows =
      wte_bytes <= range ? V : (range > align + 4 ? (range - align - 4) / row_bytes : 0) / block * block;
  if (rows == 0)
    fail("embedding", "one wte row of " + std::to_string(row_bytes) +
         " bytes does not fit in maxStorageBufferRange " + std::to_string(range));

  const uint32_t dtype_pos =
      position == PositionKind::Learned ? static_cast<uint32_t>(wpe->dtype) : push::DTYPE_F32;
  const vk::Pipeline& p =
      k.get(vk::Shader::embedding,
            {{default_workgroup(caps), 1, 1},
             {static_cast<uint32_t>(wte.dtype), dtype_pos, static_cast<uint32_t>(position),
              wte_interleaved ? 1u : 0u, types ? 1u : 0u,
              types ? static_cast<uint32_t>(wtt->dtype) : push::DTYPE_F32}});
  const vk::Groups groups = vk::groups_for(k.device(), p, uint64_t{T} * C);
  const vk::BufferSpan step_bound =
      dynamic == 2 ? step->sub(0, uint64_t{2} * T * 4) : step_binding("embedding", step, ids);
  for (uint64_t v0 = 0; v0 < V; v0 += rows) {
    const uint64_t v1 = std::min<uint64_t>(V, v0 + rows);
    const uint64_t held = vk::align_up(v1 - v0, block);  // padding rows of the last block
    const Window rows_bound = window(wte.span, v0 * C, held * C, dtype_bytes(wte.dtype), align);
    push.v_begin = static_cast<uint32_t>(v0);
    push.v_end = static_cast<uint32_t>(v1);
    push.wte_skip = rows_bound.skip;
    rec.dispatch(p,
                 {out, ids, rows_bound.span, pos.span, step_bound, types ? *types : ids,
                  types ? wtt->span : ids},
                 push, groups);
  }
}

}  // namespace

void embedding(const Ops& ops, vk::Recorder& rec, const EmbeddingArgs& a) {
  embed(ops, rec, a.out, a.ids, a.wte, a.wpe, a.T, a.C, a.V, a.n_pos, a.pos_offset, a.position,
        a.wte_interleaved, a.step, a.step ? 1 : 0, a.period, a.types, a.wtt, a.n_types, a.scale);
}

void embedding_batch(const Ops& ops, vk::Recorder& rec, const EmbeddingBatchArgs& a) {
  const vk::BufferSpan &out = a.out, &ids = a.ids, &rows = a.rows;
  const uint32_t T = a.T, C = a.C, V = a.V, n_pos = a.n_pos;
  require_elements("embedding_batch", "rows", rows, uint64_t{2} * T, sizeof(uint32_t));
  // Each row a sequence of period 1 at a position read from the table: wpe is bound whole (from
  // row 0, as for dynamic_pos 1); the host keeps every row's position below n_pos.
  embed(ops, rec, out, ids, a.wte, a.wpe, T, C, V, n_pos, 0, a.position, a.wte_interleaved, &rows,
        2, 1, nullptr, nullptr, 0, a.scale);
}

void upload_ids(const vk::Device& device, const vk::BufferSpan& dst, std::span<const int32_t> ids,
                uint32_t V, bool padding) {
  require_elements("upload_ids", "dst", dst, ids.size(), sizeof(int32_t));
  for (size_t t = 0; t < ids.size(); t++) {
    if (padding && ids[t] == ignore_target) continue;
    if (ids[t] < 0 || static_cast<uint32_t>(ids[t]) >= V)
      throw vk::Error("upload_ids: " + std::string(padding ? "target " : "token id ") +
                      std::to_string(ids[t]) + " at position " + std::to_string(t) +
                      " is outside the vocabulary [0, " + std::to_string(V) + ")" +
                      (padding ? " and not " + std::to_string(ignore_target) + " (padding)" : ""));
  }
  if (!ids.empty()) vk::upload(device, dst, ids.data(), ids.size_bytes());
}

}  // namespace model::gpu
