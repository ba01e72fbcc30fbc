#include "model/ops/gpu/attention.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/ops/gpu/choose.h"
#include "model/ops/gpu/kv_store.h"
#include "shaders/attention.h"
#include "vk/check.h"

namespace model::gpu {
namespace {

// The texel kernel's shape: workgroups of kTexelLanes invocations (llvmpipe's SIMD width, so a
// workgroup is one SIMD group), kTexelQueries queries per invocation in prefill (more reuse of
// each key read, but more registers and more masked work at the causal edge; docs/benchmark.md,
// "Tuning decisions"), keys in blocks of kTexelKeys between rescales of the running sums.
constexpr uint32_t kTexelLanes = 8, kTexelQueries = 4, kTexelKeys = 4;
static_assert(kTexelLanes * (kAttentionTexelMaxD + 1) <= push::ATTENTION_TEXEL_MAX_MERGE);
// attention_split.comp: a key's texels are one lane each, and V's parts fit the dots array.
static_assert(push::ATTENTION_SPLIT_MAX_D / 4 <= push::ATTENTION_SPLIT_WG);
static_assert(push::ATTENTION_SPLIT_WG * 4 <= push::ATTENTION_SPLIT_DOTS);
// Fewer queries than this split each query's keys over a workgroup instead.
constexpr uint32_t kTexelSplitBelow = 16;

std::string str(uint64_t v) {
  return std::to_string(v);
}

void check_shapes(const vk::BufferSpan& out, const vk::BufferSpan& q, uint32_t q_stride,
                  const vk::BufferSpan& k_cache, const vk::BufferSpan& v_cache, uint32_t T,
                  uint32_t L, uint32_t C, uint32_t H, bool causal, DType cache) {
  if (T == 0 || L == 0 || C == 0)
    throw vk::Error("attention: T=" + str(T) + ", L=" + str(L) + " and C=" + str(C) +
                     " must all be positive");
  if (H == 0 || C % H != 0)
    throw vk::Error("attention: C=" + str(C) + " is not a multiple of H=" + str(H) + " heads");
  if (causal && T > L)
    throw vk::Error("attention: causal queries are the last T of L positions, but T=" + str(T) +
                     " > L=" + str(L));
  if (q_stride < C)
    throw vk::Error("attention: q_stride=" + str(q_stride) + " is less than C=" + str(C));
  if (cache == DType::F16 && C % 2 != 0)  // kv_store writes whole words: two values of a row
    throw vk::Error("attention: an fp16 cache needs an even C, not C=" + str(C));
  const uint64_t row_bytes = uint64_t{C} * dtype_bytes(cache);
  for (const vk::BufferSpan* span : {&k_cache, &v_cache})
    if (span->size < L * row_bytes)
      throw vk::Error("attention: L=" + str(L) + " keys, but the " +
                       (span == &k_cache ? "k_cache" : "v_cache") + " holds only " +
                       str(span->size / row_bytes) + " rows of C=" + str(C));
  require_elements("attention", "out", out, uint64_t{T} * C);
  require_elements("attention", "q", q, uint64_t{T - 1} * q_stride + C);
}

// The probabilities' binding, [H, T, L], checked to fit.
vk::BufferSpan probs_binding(const vk::DeviceCaps& caps, const vk::BufferSpan& probs, uint32_t T,
                             uint32_t L, uint32_t H) {
  const uint64_t bytes = uint64_t{H} * T * L * sizeof(float);
  require_elements("attention", "probs", probs, bytes / sizeof(float));
  if (bytes > caps.max_storage_buffer_range)
    throw vk::Error("attention: the probabilities of H=" + str(H) + " heads, T=" + str(T) +
                    " queries and L=" + str(L) + " keys take " + str(bytes) +
                    " bytes, over this device's maxStorageBufferRange " +
                    str(caps.max_storage_buffer_range));
  return probs.sub(0, bytes);
}

// Workgroups for `blocks` query blocks of H heads: x = block (folded into z past the device
// limit), y = head.
vk::Groups groups(const vk::DeviceCaps& caps, uint32_t blocks, uint32_t H) {
  const uint32_t gx = std::min(blocks, caps.max_workgroup_count[0]);
  const auto gz = static_cast<uint32_t>(vk::ceil_div(blocks, gx));
  if (H > caps.max_workgroup_count[1] || gz > caps.max_workgroup_count[2])
    throw vk::Error("attention: " + str(blocks) + " query blocks of H=" + str(H) +
                     " heads exceed this device's workgroup-count limits");
  return {gx, H, gz};
}

// One call's tensors and sizes, as gpu::attention takes them. store: attention_store's call, q
// being the [T, 3C] QKV projection whose keys and values go to cache rows L - T .. L - 1.
struct Call {
  const vk::BufferSpan &out, &q, &k_cache, &v_cache;
  uint32_t q_stride, T, L, C, H;
  bool store;
  const vk::BufferSpan* probs;    // the tap, or null
  const vk::BufferSpan* scratch;  // Split's partial results, or null
  const vk::BufferSpan* step;     // the position read at run time (L - T), or null
  // A batch (attention_store_batch): each query's position and cache, [T, 2], or null.
  const vk::BufferSpan* rows = nullptr;
  DType cache = DType::F32;  // the caches' elements
  const vk::BufferSpan* bias = nullptr;  // the relative position bias [H, bias_span], or null
  uint32_t bias_span = 0;
  const vk::BufferSpan* counts = nullptr;  // Split's block counts (the merge fused), or null
  // What the options give every kernel beyond the constructor's: the caches' type, the bias,
  // the split kernel's counts.
  void take(const AttentionOptions& o) {
    cache = o.cache;
    bias = o.bias;
    bias_span = o.bias_span;
    counts = o.counts;
  }
  uint64_t row_bytes() const { return uint64_t{C} * sizeof(float); }  // of q's head and out
  uint64_t cache_row_bytes() const { return uint64_t{C} * dtype_bytes(cache); }
  // The cache rows a kernel that reads the first L binds: those, or all with the position read
  // at run time (the binding must not depend on it); a batch's caches whole, to 16 bytes.
  uint64_t cache_bytes(const vk::DeviceCaps& caps) const {
    if (rows) return std::min(k_cache.size, v_cache.size) / 16 * 16;
    return step ? whole_cache_bytes("attention", caps, k_cache, v_cache, cache_row_bytes(), L)
                : L * cache_row_bytes();
  }
  vk::BufferSpan step_span() const {
    if (!rows) return step_binding("attention", step, q.sub(0, 4));
    require_elements("attention", "rows", *rows, uint64_t{T} * 2, sizeof(uint32_t));
    return rows->sub(0, uint64_t{T} * 2 * sizeof(uint32_t));
  }
  // The Bias binding: the table, or (not read: bias_span 0) 4 bytes of q, bound read-only anyway.
  vk::BufferSpan bias_binding() const {
    return bias ? bias->sub(0, uint64_t{H} * bias_span * sizeof(float)) : q.sub(0, 4);
  }
  uint64_t q_floats() const {
    return store ? uint64_t{T} * q_stride : uint64_t{T - 1} * q_stride + C;
  }
};

// The FLOPs of a call's scores and weighted sums, 4 C per (query, key it sees), for the profile
// (vk::Recorder::set_flops); 0 where the keys are counted when the kernel runs (a decode step's
// position, a batch's rows).
double attention_flops(const Call& c, bool causal) {
  if (c.step || c.rows) return 0;
  const double T = c.T, L = c.L;
  const double pairs = causal ? T * (L - T) + T * (T + 1) / 2 : T * L;
  return 4.0 * c.C * pairs;
}

// The portable kernel: one workgroup per (query, head), keys in chunks of shared-memory scores.
void dispatch_portable(const Ops& k, vk::Recorder& rec, const Call& c,
                       const push::AttentionPush& push) {
  const vk::DeviceCaps& caps = k.device().caps();
  const uint32_t D = c.C / c.H;
  const uint32_t wg = std::min(default_workgroup(caps), push::ATTENTION_MAX_WORKGROUP);
  // Shared memory holds the shader's arrays at their maxima: chunk scores, the D-float query
  // slice and WG reduction slots.
  if (D > push::ATTENTION_MAX_D)
    throw vk::Error("attention: head dim D=" + str(D) + " exceeds the portable kernel's " +
                    str(push::ATTENTION_MAX_D) + " (its query slice in shared memory)");
  require_shared_memory(
      caps, "attention",
      (push::ATTENTION_MAX_CHUNK + push::ATTENTION_MAX_D + push::ATTENTION_MAX_WORKGROUP) *
          uint32_t{sizeof(float)});
  uint32_t chunk = push::ATTENTION_MAX_CHUNK;
  if (chunk > wg) chunk -= chunk % wg;  // whole rounds of the score loop
  const auto dpt = static_cast<uint32_t>(vk::ceil_div(D, wg));
  const vk::Pipeline& p =
      k.get(c.probs ? vk::Shader::attention_probs : vk::Shader::attention,
            {{wg, 1, 1}, {D, chunk, dpt, static_cast<uint32_t>(c.cache)}});
  // Bind only what is read or written: the first L cache rows (same offset, so still aligned).
  std::vector<vk::BufferSpan> bindings{
      c.out.sub(0, c.T * c.row_bytes()), c.q.sub(0, c.q_floats() * sizeof(float)),
      c.k_cache.sub(0, c.cache_bytes(caps)), c.v_cache.sub(0, c.cache_bytes(caps))};
  if (c.probs) bindings.push_back(probs_binding(caps, *c.probs, c.T, c.L, c.H));
  bindings.push_back(c.step_span());
  bindings.push_back(c.bias_binding());
  rec.set_flops(attention_flops(c, push.causal != 0));
  rec.dispatch(p, bindings, push, groups(caps, c.T, c.H));
}

// The cache rows the texel kernels bind: all that both spans hold, up to what one texel view
// (and, to store, one storage-buffer binding) may cover. The same rows at every step let the
// Recorder keep one view per cache rather than make one per cache length.
uint64_t texel_cache_rows(const vk::DeviceCaps& caps, const Call& c) {
  uint64_t bytes =
      std::min({c.k_cache.size, c.v_cache.size, uint64_t{caps.max_texel_buffer_elements} * 16});
  if (c.store) bytes = std::min(bytes, caps.max_storage_buffer_range);
  return bytes / c.cache_row_bytes();
}

// Why the texel kernel cannot run this call on this device; empty when it can.
std::string texel_unsupported(const vk::DeviceCaps& caps, const Call& c) {
  const uint32_t D = c.C / c.H;
  if (c.cache != DType::F32) return "an fp16 cache (the texel kernels read rgba32f caches)";
  if (!caps.storage_texel_buffers) return "no rgba32f storage texel buffers";
  if (D % 4 != 0 || D > kAttentionTexelMaxD)
    return "head dim D=" + str(D) + " is not a multiple of 4 up to " + str(kAttentionTexelMaxD);
  if (c.q_stride % 4 != 0) return "q_stride=" + str(c.q_stride) + " is not a multiple of 4";
  const uint64_t align = texel_binding_alignment(caps);
  if (c.q.offset % align != 0 || c.k_cache.offset % align != 0 || c.v_cache.offset % align != 0)
    return "q or a cache is not aligned to minTexelBufferOffsetAlignment " + str(align);
  const uint64_t texels = std::max(c.q_floats(), uint64_t{c.L} * c.C) / 4;  // q's, L cache rows'
  if (texels > caps.max_texel_buffer_elements)
    return "q or the caches span " + str(texels) + " texels, over maxTexelBufferElements " +
           str(caps.max_texel_buffer_elements);
  if (texel_cache_rows(caps, c) < c.L)
    return "L=" + str(c.L) + " cache rows exceed maxStorageBufferRange";
  return {};
}

// The texel kernel. Prefill: each invocation owns kTexelQueries queries, all their keys. Fewer
// than kTexelSplitBelow queries (decode): a workgroup per query, whose invocations take every
// lanes-th key and merge in shared memory, so that a single query still fills the SIMD lanes.
void dispatch_texel(const Ops& k, vk::Recorder& rec, const Call& c,
                    const push::AttentionPush& push) {
  const vk::DeviceCaps& caps = k.device().caps();
  const uint32_t D = c.C / c.H;
  // llvmpipe's SIMD width: one workgroup is one SIMD group.
  const uint32_t lanes =
      std::min({kTexelLanes, caps.max_workgroup_invocations, caps.max_workgroup_size[0]});
  // The merge array: each invocation's sum of weights and D partial outputs, lanes * (D + 1)
  // floats, declared at its maximum even where the keys are not split.
  require_shared_memory(caps, "attention",
                        push::ATTENTION_TEXEL_MAX_MERGE * uint32_t{sizeof(float)});
  const bool split = c.T < kTexelSplitBelow;
  const uint32_t splits = split ? lanes : 1, queries = split ? 1 : kTexelQueries;
  const vk::Shader name =
      c.store ? (c.probs ? vk::Shader::attention_texel_store_probs : vk::Shader::attention_texel_store)
              : (c.probs ? vk::Shader::attention_texel_probs : vk::Shader::attention_texel);
  const vk::Pipeline& p = k.get(name, {{lanes, 1, 1}, {D, splits, queries, kTexelKeys}});
  const uint32_t per_group = lanes / splits * queries;
  const vk::Groups g = groups(caps, static_cast<uint32_t>(vk::ceil_div(c.T, per_group)), c.H);
  // A batch binds the caches whole: its sequences' caches need not be whole rows apart.
  const uint64_t cache_bytes =
      c.rows ? c.cache_bytes(caps) : texel_cache_rows(caps, c) * c.cache_row_bytes();
  const vk::BufferSpan out = c.out.sub(0, c.T * c.row_bytes());
  const vk::BufferSpan q = c.q.sub(0, c.q_floats() * sizeof(float));
  const vk::BufferSpan kc = c.k_cache.sub(0, cache_bytes), vc = c.v_cache.sub(0, cache_bytes);
  std::vector<vk::BufferSpan> bindings{out, q, kc, vc};
  if (c.store) bindings.insert(bindings.end(), {kc, vc});  // texel reads, storage-buffer writes
  if (c.probs) bindings.push_back(probs_binding(caps, *c.probs, c.T, c.L, c.H));
  bindings.push_back(c.step_span());
  bindings.push_back(c.bias_binding());
  rec.set_flops(attention_flops(c, push.causal != 0));
  rec.dispatch(p, bindings, push, g);
}

uint32_t split_blocks(uint32_t L) {
  return static_cast<uint32_t>(vk::ceil_div(L, push::ATTENTION_SPLIT_BLOCK));
}

// attention_split.comp's storage buffers: part, q, the caches, the step, the bias, out, counts.
constexpr uint32_t kSplitBindings = 8;

// Why the split kernel cannot run this call on this device; empty when it can.
std::string split_unsupported(const vk::DeviceCaps& caps, const Call& c) {
  const uint32_t D = c.C / c.H, wg = push::ATTENTION_SPLIT_WG;
  if (!c.scratch) return "no scratch for the key blocks' partial results";
  if (c.probs) return "the attention tap needs whole rows of weights";
  if (D % 4 != 0 || D > push::ATTENTION_SPLIT_MAX_D)
    return "head dim D=" + str(D) + " is not a multiple of 4 up to " +
           str(push::ATTENTION_SPLIT_MAX_D);
  if (c.q_stride % 4 != 0) return "q_stride=" + str(c.q_stride) + " is not a multiple of 4";
  // The kernel loads 16 bytes of the cache at a time: an fp16 row must be whole 16-byte units,
  // so no load reaches past the binding's last row or into a row the same dispatch stores.
  if (c.cache == DType::F16 && c.C % 8 != 0)
    return "an fp16 cache's rows of C=" + str(c.C) + " are not whole 16-byte units (C % 8 != 0)";
  if (c.q.offset % 16 != 0 || c.k_cache.offset % 16 != 0 || c.v_cache.offset % 16 != 0)
    return "q or a cache does not start on 16 bytes";
  if (caps.max_workgroup_invocations < wg || caps.max_workgroup_size[0] < wg)
    return "workgroups of " + str(wg) + " invocations exceed the device's limit";
  const uint32_t shared = (push::ATTENTION_SPLIT_MAX_D + push::ATTENTION_SPLIT_DOTS +
                           push::ATTENTION_SPLIT_BLOCK + wg) * uint32_t{sizeof(float)};
  if (shared > caps.max_shared_memory)
    return str(shared) + " bytes of shared memory exceed the device's " +
           str(caps.max_shared_memory);
  const uint64_t need = attention_split_scratch_bytes(c.T, c.L, c.C, c.H);
  if (c.scratch->size < need)
    return "the scratch holds " + str(c.scratch->size) + " bytes, needs " + str(need);
  if (split_blocks(c.L) > caps.max_workgroup_count[0] || c.H > caps.max_workgroup_count[1] ||
      c.T > caps.max_workgroup_count[2])
    return "the grid exceeds the device's workgroup counts";
  if (std::max(need, uint64_t{c.L} * c.cache_row_bytes()) > caps.max_storage_buffer_range)
    return "the caches or the scratch exceed maxStorageBufferRange";
  if (caps.max_storage_buffers < kSplitBindings)
    return "the kernel binds " + str(kSplitBindings) + " storage buffers, the device allows " +
           str(caps.max_storage_buffers) + " per shader";
  return {};
}

// The split kernel: partial results per (key block, head, query), then their merge.
void dispatch_split(const Ops& k, vk::Recorder& rec, const Call& c,
                    push::AttentionPush p) {
  const uint32_t D = c.C / c.H, wg = push::ATTENTION_SPLIT_WG, blocks = split_blocks(c.L);
  p.splits = blocks;
  const vk::BufferSpan part =
      c.scratch->sub(0, attention_split_scratch_bytes(c.T, c.L, c.C, c.H));
  const uint64_t cache = c.cache_bytes(k.device().caps());
  const vk::BufferSpan out = c.out.sub(0, c.T * c.row_bytes());
  // With the merge fused in, one dispatch; without, the Count binding is not read (4 bytes of
  // the partials stand in) and attention_merge follows.
  const uint64_t count_bytes = uint64_t{c.T} * c.H * sizeof(uint32_t);
  const bool fused = c.counts && c.counts->size >= count_bytes;
  p.merge = fused ? 1 : 0;
  const vk::BufferSpan counts = fused ? c.counts->sub(0, count_bytes) : part.sub(0, 4);
  rec.set_flops(attention_flops(c, p.causal != 0));
  rec.dispatch(
      k.get(vk::Shader::attention_split, {{wg, 1, 1}, {D, static_cast<uint32_t>(c.cache)}}),
      {part, c.q.sub(0, c.q_floats() * sizeof(float)), c.k_cache.sub(0, cache),
       c.v_cache.sub(0, cache), c.step_span(), c.bias_binding(), out, counts},
      p, {blocks, c.H, c.T});
  if (!fused)
    rec.dispatch(k.get(vk::Shader::attention_merge, {{wg, 1, 1}, {D}}), {out, part}, p,
                 {c.H, c.T, 1});
}

// The tiled kernel's shared arrays at their maxima: the tile, the weights and the lanes' sums.
constexpr uint32_t kTiledSharedBytes =
    (push::ATTENTION_TILED_TILE * 4 +
     push::ATTENTION_TILED_QUERIES * (push::ATTENTION_TILED_KEYS + 1) + push::ATTENTION_TILED_WG) *
    uint32_t{sizeof(float)};
static_assert(push::ATTENTION_TILED_TILE >= push::ATTENTION_TILED_KEYS / 2 *
                                               (push::ATTENTION_TILED_MAX_D / 4 + 1));

// Why the tiled kernel cannot run this call on this device; empty when it can.
std::string tiled_unsupported(const vk::DeviceCaps& caps, const Call& c) {
  const uint32_t D = c.C / c.H, wg = push::ATTENTION_TILED_WG;
  if (c.probs) return "the attention tap (its weights are written by the portable kernel)";
  if (c.rows) return "a batch of sequences";
  if (D % 4 != 0 || D > push::ATTENTION_TILED_MAX_D)
    return "head dim D=" + str(D) + " is not a multiple of 4 up to " +
           str(push::ATTENTION_TILED_MAX_D);
  // 16-byte loads of whole fp16 units: 8 values, so each head's slice of a row starts on one.
  if (c.cache == DType::F16 && D % 8 != 0)
    return "an fp16 cache's head slices (D=" + str(D) + ") are not whole 16-byte units";
  if (c.q_stride % 4 != 0) return "q_stride=" + str(c.q_stride) + " is not a multiple of 4";
  if (c.out.offset % 16 != 0 || c.q.offset % 16 != 0 || c.k_cache.offset % 16 != 0 ||
      c.v_cache.offset % 16 != 0)
    return "out, q or a cache does not start on 16 bytes";
  if (caps.max_workgroup_invocations < wg || caps.max_workgroup_size[0] < wg)
    return "workgroups of " + str(wg) + " invocations exceed the device's limit";
  if (kTiledSharedBytes > caps.max_shared_memory)
    return str(kTiledSharedBytes) + " bytes of shared memory exceed the device's " +
           str(caps.max_shared_memory);
  if (c.H > caps.max_workgroup_count[1]) return "H=" + str(c.H) + " heads exceed the grid";
  if (c.cache_bytes(caps) > caps.max_storage_buffer_range)
    return "the caches exceed maxStorageBufferRange";
  return {};
}

// The key ranges the tiled kernel splits a call into: 0 (not split) where its blocks times heads
// reach the tuning's workgroups, or where the scratch holds fewer than two ranges' partials;
// else enough to reach them, at most one per 64 keys and what the scratch holds.
uint32_t tiled_splits(const vk::DeviceCaps& caps, const Call& c, uint32_t target) {
  const uint64_t blocks = vk::ceil_div(c.T, push::ATTENTION_TILED_QUERIES);
  if (!c.scratch || blocks * c.H >= target) return 0;
  // attention_merge's grid: (head, query)
  if (c.H > caps.max_workgroup_count[0] || c.T > caps.max_workgroup_count[1]) return 0;
  const uint64_t per_range = uint64_t{c.T} * c.H * (c.C / c.H + 2) * sizeof(float);
  const uint64_t room = std::min(c.scratch->size, caps.max_storage_buffer_range) / per_range;
  const uint64_t splits = std::min({vk::ceil_div(target, blocks * c.H),
                                    vk::ceil_div(c.L, uint64_t{64}), room});
  return splits >= 2 ? static_cast<uint32_t>(splits) : 0;
}

// The tiled kernel: one workgroup per (block of ATTENTION_TILED_QUERIES queries, head), or per
// (block, head, key range) and then attention_merge.
void dispatch_tiled(const Ops& k, vk::Recorder& rec, const Call& c, push::AttentionPush p) {
  const vk::DeviceCaps& caps = k.device().caps();
  const uint32_t D = c.C / c.H;
  const uint64_t cache = c.cache_bytes(caps);
  const vk::Pipeline& pipeline = k.get(
      vk::Shader::attention_tiled,
      {{push::ATTENTION_TILED_WG, 1, 1}, {D, static_cast<uint32_t>(c.cache)}});
  const auto blocks = static_cast<uint32_t>(vk::ceil_div(c.T, push::ATTENTION_TILED_QUERIES));
  const vk::BufferSpan out = c.out.sub(0, c.T * c.row_bytes());
  const vk::BufferSpan q = c.q.sub(0, c.q_floats() * sizeof(float));
  const vk::BufferSpan kc = c.k_cache.sub(0, cache), vc = c.v_cache.sub(0, cache);
  p.splits = tiled_splits(caps, c, k.policy().tuning.attention_groups);
  rec.set_flops(attention_flops(c, p.causal != 0));  // the next dispatch: the tiled pass
  if (p.splits == 0) {
    rec.dispatch(pipeline, {out, q, kc, vc, c.step_span(), c.bias_binding()}, p,
                 groups(caps, blocks, c.H));
    return;
  }
  const vk::BufferSpan part =
      c.scratch->sub(0, uint64_t{c.T} * c.H * p.splits * (D + 2) * sizeof(float));
  rec.dispatch(pipeline, {part, q, kc, vc, c.step_span(), c.bias_binding()}, p,
               groups(caps, blocks * p.splits, c.H));
  rec.dispatch(k.get(vk::Shader::attention_merge, {{push::ATTENTION_SPLIT_WG, 1, 1}, {D}}), {out, part}, p,
               {c.H, c.T, 1});
}

// Throws, naming the kernel asked for, where it cannot run the call (`why_not` non-empty).
void require_runs(const vk::DeviceCaps& caps, const char* kernel, const std::string& why_not) {
  if (!why_not.empty())
    throw vk::Error(std::string("attention: the ") + kernel + " kernel cannot run on device '" +
                    caps.name + "': " + why_not);
}

// The kernel a call runs: the one asked for, or for Auto the device's choice where it can run.
AttentionKernel choose_kernel(const Ops& ops, const Call& c, AttentionKernel asked) {
  if (asked == AttentionKernel::Portable) return asked;
  const vk::DeviceCaps& caps = ops.caps();
  if (asked == AttentionKernel::Split) {
    require_runs(caps, "split", split_unsupported(caps, c));
    return asked;
  }
  if (asked == AttentionKernel::Tiled) {
    require_runs(caps, "tiled", tiled_unsupported(caps, c));
    return asked;
  }
  if (asked == AttentionKernel::Texel) {
    require_runs(caps, "texel", texel_unsupported(caps, c));
    return asked;
  }
  const auto fits = [&](AttentionKernel k) {
    switch (k) {
      case AttentionKernel::Texel: return texel_unsupported(caps, c).empty();
      case AttentionKernel::Split: return split_unsupported(caps, c).empty();
      case AttentionKernel::Tiled: return tiled_unsupported(caps, c).empty();
      default: return true;
    }
  };
  for (AttentionKernel k : attention_order(ops.policy(), c.T))
    if (fits(k)) return k;
  return AttentionKernel::Portable;  // unreachable: the order ends in Portable
}

push::AttentionPush make_push(const Call& c, const AttentionOptions& options) {
  const float D = static_cast<float>(c.C / c.H);
  const float scale = options.scale != 0 ? options.scale : 1.0f / std::sqrt(D);
  // With the position read at run time, L counts only the keys past it: the T new ones (in a
  // batch, each sequence's one).
  push::AttentionPush p{};
  if (c.rows)
    p = {c.T, 1, c.C, c.q_stride, options.causal ? 1u : 0u, scale, 0, 2u};
  else
    p = {c.T, c.step ? c.T : c.L, c.C, c.q_stride, options.causal ? 1u : 0u, scale};
  if (c.step) p.dynamic_pos = 1;
  p.bias_span = options.bias_span;
  return p;
}

// Checks the relative position bias of `options` against H heads whose queries and keys lie in
// `rows` positions (`rows_what` names them: the L keys, or with positions read at run time the
// cache's n_ctx rows): a table with bias_span = 2R + 1, R >= rows - 1, so every j - p fits.
void check_bias(const char* op, const vk::DeviceCaps& caps, const AttentionOptions& options,
                uint32_t H, uint64_t rows, const char* rows_what) {
  const uint32_t span = options.bias_span;
  if (span == 0) {
    if (options.bias) fail(op, "a relative position bias table was given with bias_span = 0");
    return;
  }
  if (!options.bias)
    fail(op, "bias_span = " + str(span) + " but no relative position bias table was given");
  if (span % 2 == 0)
    fail(op, "the relative position bias's bias_span = " + str(span) +
                 " is even; it must be 2R + 1 (distances -R .. R)");
  const uint64_t R = span / 2;
  if (rows > 0 && R < rows - 1)
    fail(op, "the relative position bias reaches distances up to R = " + str(R) + ", but " +
                 rows_what + " = " + str(rows) + " positions need R >= " + str(rows - 1));
  const uint64_t floats = uint64_t{H} * span;
  require_elements(op, "bias", *options.bias, floats);
  if (floats * sizeof(float) > caps.max_storage_buffer_range)
    fail(op, "the relative position bias's " + str(floats * sizeof(float)) +
                 " bytes exceed maxStorageBufferRange " + str(caps.max_storage_buffer_range));
}

// The rows both caches hold, of C elements of `cache`.
uint64_t cache_rows(const vk::BufferSpan& k_cache, const vk::BufferSpan& v_cache, uint32_t C,
                    DType cache) {
  return std::min(k_cache.size, v_cache.size) / (uint64_t{C} * dtype_bytes(cache));
}

// A batch's call: L is every row of the caches, which it binds whole.
Call batch_call(const vk::BufferSpan& out, const vk::BufferSpan& k_caches,
                const vk::BufferSpan& v_caches, const vk::BufferSpan& qkv,
                const vk::BufferSpan& rows, uint32_t T, uint32_t C, uint32_t H,
                const AttentionOptions& options) {
  const auto L = static_cast<uint32_t>(std::min(k_caches.size, v_caches.size) /
                                       (uint64_t{C} * dtype_bytes(options.cache)));
  Call c{out, qkv, k_caches, v_caches, 3 * C, T, L, C, H, true, nullptr, options.scratch,
         nullptr, &rows, options.cache};
  c.take(options);
  return c;
}

}  // namespace

uint64_t attention_split_scratch_bytes(uint32_t T, uint32_t L, uint32_t C, uint32_t H) {
  if (H == 0) return 0;
  return uint64_t{T} * H * split_blocks(L) * (C / H + 2) * sizeof(float);
}

// Splitting happens only where blocks x H = G < groups, in at most ceil(groups / G) ranges, and
// T <= 16 x blocks: T x H x ranges <= 16 x G x ceil(groups / G) < 32 x groups.
uint64_t attention_tiled_scratch_bytes(uint32_t C, uint32_t H, uint32_t groups) {
  if (H == 0) return 0;
  return uint64_t{32} * groups * (C / H + 2) * sizeof(float);
}

uint64_t attention_model_scratch_bytes(const KernelPolicy& policy, uint32_t n_ctx, uint32_t C,
                                       uint32_t H) {
  const uint64_t split = attention_split_scratch_bytes(kAttentionSplitMaxT, n_ctx, C, H);
  if (!attention_order(policy, kAttentionSplitMaxT + 1).has(AttentionKernel::Tiled)) return split;
  return std::max(split, attention_tiled_scratch_bytes(C, H, policy.tuning.attention_groups));
}

void attention(const Ops& ops, vk::Recorder& rec, const AttentionArgs& a) {
  const vk::BufferSpan &out = a.out, &q = a.q, &k_cache = a.k_cache, &v_cache = a.v_cache;
  const uint32_t q_stride = a.q_stride, T = a.T, L = a.L, C = a.C, H = a.H;
  const AttentionOptions& options = a.options;
  check_shapes(out, q, q_stride, k_cache, v_cache, T, L, C, H, options.causal, options.cache);
  if (options.step)
    check_bias("attention", ops.caps(), options, H, cache_rows(k_cache, v_cache, C, options.cache),
               "the cache's n_ctx");
  else
    check_bias("attention", ops.caps(), options, H, L, "L");
  Call c{out, q, k_cache, v_cache, q_stride, T, L, C, H, false, options.probs,
         options.scratch, options.step};
  c.take(options);
  const AttentionKernel kernel = choose_kernel(ops, c, options.kernel);
  if (kernel == AttentionKernel::Texel)
    dispatch_texel(ops, rec, c, make_push(c, options));
  else if (kernel == AttentionKernel::Split)
    dispatch_split(ops, rec, c, make_push(c, options));
  else if (kernel == AttentionKernel::Tiled)
    dispatch_tiled(ops, rec, c, make_push(c, options));
  else
    dispatch_portable(ops, rec, c, make_push(c, options));
}

namespace {

// Why the split kernel cannot run this batch (the caches bound whole, p.splits covering max_len
// keys); empty when it can.
std::string split_batch_unsupported(const vk::DeviceCaps& caps, const Call& c, uint32_t max_len) {
  if (c.T > kAttentionSplitMaxT)
    return "a batch of " + str(c.T) + " rows (1 to " + str(kAttentionSplitMaxT) + ")";
  if (max_len == 0 || max_len > c.L)
    return "the longest row's " + str(max_len) + " keys (1 to the caches' " + str(c.L) + " rows)";
  Call longest = c;
  longest.L = max_len;  // the scratch and the grid cover the longest row's key blocks
  return split_unsupported(caps, longest);
}

// The kernel that runs a batch, choose.h's attention_batch_kernel where it can; `why` says why it
// cannot where that is so.
AttentionKernel batch_kernel(const Ops& ops, const Call& c, uint32_t max_len,
                             std::string& why) {
  const vk::DeviceCaps& caps = ops.caps();
  const AttentionKernel kernel = attention_batch_kernel(ops.policy(), c.cache);
  why.clear();
  const uint64_t bytes = std::min(c.k_cache.size, c.v_cache.size);
  if (c.T == 0 || c.L == 0) {
    why = c.T == 0 ? "a batch of 0 rows" : "the caches hold no row";
  } else if (c.cache == DType::F16 && c.C % 2 != 0) {
    why = "an fp16 cache needs an even C, not C=" + str(c.C);
  } else if (kernel == AttentionKernel::Texel) {
    if (c.T >= kTexelSplitBelow)
      why = "a batch of " + str(c.T) + " rows (1 to " + str(kTexelSplitBelow - 1) + ")";
    else if (bytes > std::min(uint64_t{caps.max_texel_buffer_elements} * 16,
                              caps.max_storage_buffer_range))
      why = "the caches' " + str(bytes) + " bytes exceed what one binding may hold";
    else
      why = texel_unsupported(caps, c);
    if (why.empty()) return AttentionKernel::Texel;
  } else if (kernel == AttentionKernel::Split) {
    if (bytes > caps.max_storage_buffer_range)
      why = "the caches' " + str(bytes) + " bytes exceed what one binding may hold";
    else
      why = split_batch_unsupported(caps, c, max_len);
    if (why.empty()) return AttentionKernel::Split;
  } else {
    why = "the kernel policy runs neither the texel nor the split attention";
  }
  return AttentionKernel::Auto;
}

}  // namespace

std::string attention_store_batch_unsupported(const Ops& ops, const AttentionStoreBatchArgs& a) {
  const uint32_t C = a.C, H = a.H;
  if (C == 0 || H == 0 || C % H != 0) return "C=" + str(C) + " is not a multiple of H=" + str(H);
  // qkv stands in for out and rows, which only a recording reads.
  const Call c = batch_call(a.qkv, a.k_caches, a.v_caches, a.qkv, a.qkv, a.T, C, H, a.options);
  std::string why;
  batch_kernel(ops, c, a.max_len, why);
  return why;
}

void attention_store_batch(const Ops& ops, vk::Recorder& rec, const AttentionStoreBatchArgs& a) {
  const vk::BufferSpan &out = a.out, &qkv = a.qkv;
  const uint32_t T = a.T, max_len = a.max_len, C = a.C, H = a.H;
  const AttentionOptions& options = a.options;
  const vk::DeviceCaps& caps = ops.device().caps();
  if (C == 0 || H == 0 || C % H != 0)
    throw vk::Error("attention_store_batch: C=" + str(C) + " is not a multiple of H=" + str(H));
  const Call c = batch_call(out, a.k_caches, a.v_caches, qkv, a.rows, T, C, H, options);
  std::string why_not;
  const AttentionKernel kernel = batch_kernel(ops, c, max_len, why_not);
  if (!why_not.empty())
    throw vk::Error("attention_store_batch cannot run on device '" + caps.name + "': " + why_not);
  require_elements("attention_store_batch", "qkv", qkv, uint64_t{T} * 3 * C);
  require_elements("attention_store_batch", "out", out, uint64_t{T} * C);
  check_bias("attention_store_batch", caps, options, H, max_len, "the longest row's max_len");
  push::AttentionPush push = make_push(c, options);
  if (kernel == AttentionKernel::Texel) {
    dispatch_texel(ops, rec, c, push);
    return;
  }
  // Split, with each row's key and value stored into its cache by the same dispatch, over the
  // longest row's key blocks, the caches bound whole as the texel kernel binds them.
  push.store = 1;
  Call longest = c;
  longest.L = max_len;
  dispatch_split(ops, rec, longest, push);
}

void attention_store(const Ops& ops, vk::Recorder& rec, const AttentionStoreArgs& a) {
  const vk::BufferSpan &out = a.out, &k_cache = a.k_cache, &v_cache = a.v_cache, &qkv = a.qkv;
  const uint32_t T = a.T, pos = a.pos, C = a.C, H = a.H;
  const AttentionOptions& options = a.options;
  if (C == 0) throw vk::Error("attention_store: C must be positive");
  const uint64_t n_ctx = cache_rows(k_cache, v_cache, C, options.cache);
  const uint64_t end = uint64_t{pos} + T;
  if (end > n_ctx)
    throw vk::Error("attention_store: rows " + str(pos) + ".." + str(end - 1) +
                     " do not fit the cache of n_ctx = " + str(n_ctx) + " rows of C = " + str(C));
  const uint32_t L = pos + T;
  require_elements("attention_store", "qkv", qkv, uint64_t{T} * 3 * C);
  check_shapes(out, qkv, 3 * C, k_cache, v_cache, T, L, C, H, options.causal, options.cache);
  if (options.step)
    check_bias("attention_store", ops.caps(), options, H, n_ctx, "the cache's n_ctx");
  else
    check_bias("attention_store", ops.caps(), options, H, L, "L");
  Call c{out, qkv, k_cache, v_cache, 3 * C, T, L, C, H, true, options.probs,
         options.scratch, options.step};
  c.take(options);
  const AttentionKernel kernel = choose_kernel(ops, c, options.kernel);
  if (kernel == AttentionKernel::Texel) {
    dispatch_texel(ops, rec, c, make_push(c, options));
    return;
  }
  if (kernel == AttentionKernel::Split) {  // the KV store fused in (attention_split.comp)
    push::AttentionPush push = make_push(c, options);
    push.store = 1;
    dispatch_split(ops, rec, c, push);
    return;
  }
  kv_store(ops, rec,
           {.k_cache = k_cache,
            .v_cache = v_cache,
            .qkv = qkv,
            .T = T,
            .C = C,
            .pos = pos,
            .step = options.step,
            .cache = options.cache});
  attention(ops, rec,
            {.out = out,
             .q = qkv,
             .k_cache = k_cache,
             .v_cache = v_cache,
             .q_stride = 3 * C,
             .T = T,
             .L = L,
             .C = C,
             .H = H,
             .options = options});
}

}  // namespace model::gpu
