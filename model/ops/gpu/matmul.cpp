#include "model/ops/gpu/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "vk/check.h"

namespace model::gpu {
namespace {

uint32_t floor_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p <= v / 2) p *= 2;
  return p;
}

using vk::ceil_div;

// Shared-memory tiles of the tiled kernel, largest first: BM x BN outputs per workgroup of
// (BN / TN) x (BM / TM) invocations, K staged BK at a time. Whatever the tile, the shader's
// shared arrays are MATMUL_TILE_MAX floats each, so only the workgroup limits choose.
struct Tile {
  uint32_t bm, bn, bk, tm, tn;
};
constexpr Tile kTiles[] = {
    {64, 64, 16, 4, 4}, {32, 32, 16, 4, 4}, {16, 16, 8, 2, 2}, {8, 8, 4, 1, 1}, {4, 4, 4, 1, 1}};
static_assert(std::all_of(std::begin(kTiles), std::end(kTiles), [](const Tile& t) {
  return t.bk * t.bm <= push::MATMUL_TILE_MAX && t.bk * t.bn <= push::MATMUL_TILE_MAX;
}));

const Tile& tile_for(const vk::DeviceCaps& caps) {
  require_shared_memory(caps, "matmul", 2 * push::MATMUL_TILE_MAX * uint32_t{sizeof(float)});
  for (const Tile& t : kTiles) {
    const uint32_t nx = t.bn / t.tn, ny = t.bm / t.tm;
    if (nx * ny <= caps.max_workgroup_invocations && nx <= caps.max_workgroup_size[0] &&
        ny <= caps.max_workgroup_size[1])
      return t;
  }
  fail("matmul", "device '" + caps.name + "' has too small workgroups");
}

// The k steps one dispatch of a tiled kernel may take under the device's loop cap (0: any).
// llvmpipe counts every loop iteration of an invocation, and one more as each loop exits; a
// step of the tiled kernel is its own iteration, the x and W loads' loops and the BK
// multiply-adds (the register-tile loops unroll): 28 with the 64 x 64 x 16 tile, measured as
// where a sum over K stopped (37,445 of 50,257 terms); the cooperative-matrix emulation's step
// runs 43 (24,400 of 50,000), counted here as two scalar steps. Half the cap leaves room for a
// compiler that unrolls less.
uint32_t tiled_k_steps(const vk::DeviceCaps& caps, MatmulKernel kernel) {
  if (caps.loop_iteration_cap == 0 ||
      (kernel != MatmulKernel::Tiled && kernel != MatmulKernel::CoopEmulated))
    return 0;
  const Tile& t = tile_for(caps);
  const uint32_t threads = (t.bn / t.tn) * (t.bm / t.tm);
  uint32_t step = static_cast<uint32_t>(1 + (ceil_div(t.bm * t.bk, threads) + 1) +
                                        (ceil_div(t.bk * t.bn, threads) + 1) + (t.bk + 1));
  if (kernel == MatmulKernel::CoopEmulated) step *= 2;
  return std::max(1u, caps.loop_iteration_cap / 2 / step);
}

// How one call is carried out: the pipeline(s), and the blocks x, out and W are split into.
struct Plan {
  const vk::Pipeline* last = nullptr;   // with the activation
  const vk::Pipeline* plain = nullptr;  // without: K-chunks before the last
  uint32_t rows = 0;                     // rows of x and out per pass
  uint32_t chunk = 0;                    // rows of W per chunk (of N for [N, K], of K for [K, N])
  uint32_t out_per_group = 0;            // outputs one workgroup covers (vector kernel)
  uint32_t tile_bn = 0, tile_bm = 0;     // (tiled kernel)
  uint32_t tile_rows = 0;                // rows per workgroup along z (interleaved kernel)
  bool split_k = false;                  // W [K, N] in several chunks: plain is needed
  bool norm_bindings = false;            // gamma and beta at bindings 5 and 6 (a fused LayerNorm)
  uint64_t align = 0;                    // of every binding's offset
};

// plan.last with the call's activation and, where chunks of W [K, N] sum into out before it
// applies, plan.plain without: spec(activation) gives each one's specialization.
template <class Spec>
void set_pipelines(const Ops& k, Plan& plan, const MatmulOptions& o, vk::Shader name,
                   const Spec& spec) {
  plan.last = &k.get(name, spec(o.act));
  plan.plain = plan.split_k && o.act != Activation::None ? &k.get(name, spec(Activation::None))
                                                         : plan.last;
}

// The tiled kernels' grid: x over the chunk's outputs in tiles of bn, y over the pass's rows in
// tiles of bm; chunks of W [N, K] and passes shrink to fit the device's workgroup counts.
void fit_tiles(const vk::DeviceCaps& caps, Plan& plan, const MatmulOptions& o, uint32_t N,
               uint32_t bm, uint32_t bn) {
  plan.tile_bm = bm;
  plan.tile_bn = bn;
  plan.rows = static_cast<uint32_t>(
      std::min<uint64_t>(plan.rows, uint64_t(caps.max_workgroup_count[1]) * bm));
  const uint64_t max_outputs = uint64_t(caps.max_workgroup_count[0]) * bn;
  if (o.layout == WeightLayout::NK)
    plan.chunk = static_cast<uint32_t>(std::min<uint64_t>(plan.chunk, max_outputs));
  else if (N > max_outputs)
    fail("matmul", "N = " + std::to_string(N) + " exceeds this device's workgroup count");
}

// The matrix-vector kernel: a power-of-two workgroup whose reduction buffer (ROWS floats per
// invocation) fits the shader's MATMUL_VEC_MAX_PARTIAL, lanes along the weight's contiguous axis.
void plan_vector(const Ops& k, Plan& plan, const MatmulOptions& o, DType dtype, uint32_t T) {
  const vk::DeviceCaps& caps = k.device().caps();
  require_shared_memory(caps, "matmul", push::MATMUL_VEC_MAX_PARTIAL * uint32_t{sizeof(float)});
  uint32_t rows = 1;
  while (rows < std::min(T, kMatmulVecRows)) rows *= 2;  // few pipeline variants
  const uint32_t wg = floor_pow2(
      std::min({256u, caps.max_workgroup_invocations, push::MATMUL_VEC_MAX_PARTIAL / rows}));
  const bool nk = o.layout == WeightLayout::NK;
  const uint32_t x = std::min({wg, nk ? 64u : 32u, floor_pow2(caps.max_workgroup_size[0])});
  const uint32_t y = std::min(wg / x, floor_pow2(caps.max_workgroup_size[1]));
  plan.out_per_group = nk ? y : x;
  plan.rows = std::min(plan.rows, rows);
  const auto spec = [&](Activation a) {
    return vk::Specialization{{x, y, 1},
                               {static_cast<uint32_t>(o.layout), static_cast<uint32_t>(dtype),
                                static_cast<uint32_t>(a), rows}};
  };
  set_pipelines(k, plan, o, vk::Shader::matmul_vec, spec);
}

// The texel-buffer matrix-vector kernel: x lanes (8, the SIMD width of llvmpipe, so that a SIMD
// group reads one contiguous block of W) by y slices of K (W [K, N]) or groups of 8 rows
// (W [N, K]), whose partial sums (8 floats per row of x per invocation) fit the shader's
// MATMUL_TEXEL_MAX_PARTIAL.
void plan_texel(const Ops& k, Plan& plan, const MatmulOptions& o, DType dtype, uint32_t T) {
  const vk::DeviceCaps& caps = k.device().caps();
  require_shared_memory(caps, "matmul", push::MATMUL_TEXEL_MAX_PARTIAL * uint32_t{sizeof(float)});
  uint32_t rows = 1;
  while (rows < std::min(T, kMatmulVecRows)) rows *= 2;
  const uint32_t wg = floor_pow2(std::min(caps.max_workgroup_invocations, 64u));
  const uint32_t max_x = floor_pow2(caps.max_workgroup_size[0]);
  static_assert(kMatmulVecRows * 64 * 8 <= push::MATMUL_TEXEL_MAX_PARTIAL);
  const uint32_t fit = push::MATMUL_TEXEL_MAX_PARTIAL / (rows * 8);  // invocations, at least 64
  const uint32_t x = std::min({8u, wg, max_x});
  const uint32_t y = floor_pow2(std::min({8u, wg / x, fit / x, caps.max_workgroup_size[1]}));
  plan.out_per_group = o.layout == WeightLayout::NK
                           ? y * 8
                           : x * static_cast<uint32_t>(16 / dtype_bytes(dtype));
  plan.rows = std::min(plan.rows, rows);
  const auto spec = [&](Activation a) {
    return vk::Specialization{{x, y, 1},
                               {static_cast<uint32_t>(o.layout), static_cast<uint32_t>(dtype),
                                static_cast<uint32_t>(a), rows}};
  };
  set_pipelines(k, plan, o, vk::Shader::matmul_vec_texel, spec);
}

// The wide matrix-vector kernel (W [N, K]): the tuning table's gemv_outs rows of W per workgroup
// of its gemv_workgroup invocations along K (one or two SIMD groups: the reduction runs once per
// row, so a wider group only adds shared-memory traffic), which makes N / gemv_outs workgroups:
// 384 for GPT-2 small's output projections at 2, enough to fill a 100-unit GPU several times.
void plan_wide(const Ops& k, Plan& plan, const MatmulOptions& o, DType dtype, uint32_t T) {
  const vk::DeviceCaps& caps = k.device().caps();
  uint32_t rows = 1;
  while (rows < std::min(T, kMatmulVecRows)) rows *= 2;
  const GpuTuning& tuning = k.policy().tuning;
  const uint32_t wg = floor_pow2(std::min({tuning.gemv_workgroup,
                                           push::MATMUL_WIDE_MAX_WORKGROUP,
                                           caps.max_workgroup_invocations,
                                           caps.max_workgroup_size[0]}));
  const uint32_t outs = std::clamp(tuning.gemv_outs, 1u, push::MATMUL_WIDE_MAX_OUTS);
  static_assert(kMatmulVecRows <= push::MATMUL_WIDE_MAX_ROWS);
  // The fused LayerNorm's statistics reduce 2 sums per row through the same shared array.
  static_assert(push::MATMUL_WIDE_MAX_OUTS >= 2);
  constexpr uint32_t shared_bytes = push::MATMUL_WIDE_MAX_WORKGROUP * push::MATMUL_WIDE_MAX_ROWS *
                                    push::MATMUL_WIDE_MAX_OUTS * 4;
  require_shared_memory(caps, "matmul", shared_bytes);
  plan.out_per_group = outs;
  plan.rows = std::min(plan.rows, rows);
  plan.norm_bindings = true;
  const vk::Specialization spec{{wg, 1, 1},
                                 {static_cast<uint32_t>(o.layout), static_cast<uint32_t>(dtype),
                                  static_cast<uint32_t>(o.act), rows, outs,
                                  o.norm ? 1 + static_cast<uint32_t>(o.norm->kind) : 0u}};
  plan.last = plan.plain =
      &k.get(caps.subgroup_arithmetic ? vk::Shader::matmul_vec_wide : vk::Shader::matmul_vec_wide_shared,
             spec);
}

uint32_t interleaved_workgroup(const vk::DeviceCaps& caps) {
  return std::max(8u, floor_pow2(std::min({caps.max_workgroup_invocations,
                                           caps.max_workgroup_size[0],
                                           std::clamp(caps.subgroup_size, 8u, 32u)})));
}

// The interleaved kernel: 8 or kInterleavedLanes invocations per block of rows of W (see
// matmul_interleaved.glsl), no shared memory, so only the workgroup size limits apply.
void plan_interleaved(const Ops& k, Plan& plan, const MatmulOptions& o, DType dtype,
                      uint32_t T, bool argmax) {
  const vk::DeviceCaps& caps = k.device().caps();
  // Tiles of 1, 2, 4, 8 or kInterleavedRows rows: a 16-row tile compiles four times as long as
  // an 8-row one on lavapipe with a cold cache (2 s against 0.5 s) and, on the prompts that
  // would get it, gives half as many workgroups to spread over the threads.
  uint32_t rows = 1;
  while (rows < std::min(T, kInterleavedRows)) rows *= 2;
  if (rows == 16) rows = 8;
  // A workgroup of one SIMD group (llvmpipe's subgroup): llvmpipe runs each workgroup on one
  // thread, so small workgroups spread a narrow matrix evenly over the threads. GPT-2 small's
  // N = 768 projections at 8 lanes are 12 workgroups of 8 where 32 invocations made 3, two
  // rounds on two threads with one thread idle in the second.
  const uint32_t wg = interleaved_workgroup(caps);
  // Up to 8 rows (decoding, batches, short prompts) keep 8 lanes (64 / 8 = 8 rows of W each),
  // whose smaller tile compiles faster: at 4 lanes the 8-row batch ran 3-5% faster, but the
  // README's first command waited about a second longer for its first token with a cold cache
  // (docs/benchmark.md, "Batched decoding"). The head's argmax partials need 8.
  const uint32_t lanes = argmax || rows <= 8 ? 8 : kInterleavedLanes;
  plan.out_per_group = wg / lanes * push::MATMUL_BLOCK_ROWS;
  const bool shuffle = matmul_interleaved_shuffles(caps, rows);
  // A dispatch takes all the rows the bindings allow, `rows` per workgroup along z.
  plan.tile_rows = rows;
  plan.norm_bindings = true;
  plan.rows = static_cast<uint32_t>(
      std::min<uint64_t>(plan.rows, uint64_t(caps.max_workgroup_count[2]) * rows));
  const vk::Specialization spec{{wg, 1, 1},
                                 {static_cast<uint32_t>(o.layout), static_cast<uint32_t>(dtype),
                                  push::ACT_NONE /* in the flags */, rows, argmax ? 1u : 0u,
                                  o.norm ? 1 + static_cast<uint32_t>(o.norm->kind) : 0u, lanes}};
  plan.last = plan.plain =
      &k.get(shuffle ? vk::Shader::matmul_interleaved_shuffle : vk::Shader::matmul_interleaved,
             spec);
}

void plan_tiled(const Ops& k, Plan& plan, const MatmulOptions& o, DType dtype, uint32_t N) {
  const vk::DeviceCaps& caps = k.device().caps();
  const Tile& t = tile_for(caps);
  fit_tiles(caps, plan, o, N, t.bm, t.bn);
  const auto spec = [&](Activation a) {
    return vk::Specialization{{t.bn / t.tn, t.bm / t.tm, 1},
                               {static_cast<uint32_t>(o.layout), static_cast<uint32_t>(dtype),
                                static_cast<uint32_t>(a), t.bm, t.bn, t.bk, t.tm, t.tn}};
  };
  set_pipelines(k, plan, o, vk::Shader::matmul, spec);
}

// The cooperative-matrix tiles: on the matrix units, or (CoopEmulated) emulated, with the
// staged tiles then fp32 rather than fp16 in shared memory.
constexpr uint32_t kCoopWorkgroup = push::MATMUL_COOP_LANES * push::MATMUL_COOP_SUBGROUPS;

void plan_coop(const Ops& k, Plan& plan, const MatmulOptions& o, DType dtype, uint32_t N,
               bool hardware) {
  const vk::DeviceCaps& caps = k.device().caps();
  if (const std::string why = matmul_coop_unsupported(caps, hardware); !why.empty())
    fail("matmul", why);
  fit_tiles(caps, plan, o, N, push::MATMUL_COOP_BM, push::MATMUL_COOP_BN);
  const auto spec = [&](Activation a) {
    return vk::Specialization{{kCoopWorkgroup, 1, 1},
                               {static_cast<uint32_t>(o.layout), static_cast<uint32_t>(dtype),
                                static_cast<uint32_t>(a)}};
  };
  set_pipelines(k, plan, o,
                hardware ? vk::Shader::matmul_coop : vk::Shader::matmul_coop_emulated, spec);
}

bool overlaps(const vk::BufferSpan& a, uint64_t a_bytes, const vk::BufferSpan& b,
              uint64_t b_bytes) {
  return a.buffer == b.buffer && a.offset < b.offset + b_bytes && b.offset < a.offset + a_bytes;
}

void check_arguments(const vk::BufferSpan& out, const vk::BufferSpan& x, const Weight& w,
                     const vk::BufferSpan* bias, const vk::BufferSpan* residual, uint64_t T,
                     uint64_t K, uint64_t N, const MatmulOptions& o) {
  if (T == 0 || K == 0 || N == 0)
    fail("matmul", "T, K and N must be positive (got T = " + std::to_string(T) +
         ", K = " + std::to_string(K) + ", N = " + std::to_string(N) + ")");
  const uint64_t x_row = o.x_row;
  const uint64_t w_bytes = o.layout == WeightLayout::Interleaved
                               ? interleaved_bytes(w.dtype, static_cast<uint32_t>(K),
                                                   static_cast<uint32_t>(N))
                               : ceil_div(K * N * dtype_bytes(w.dtype), 4) * 4;  // fp16 pairs
  require_elements("matmul", "out", out, T * N);
  require_elements("matmul", "x", x, (x_row + T) * K);
  require_elements("matmul", "w", w.span, w_bytes, 1);
  if (bias) require_elements("matmul", "bias", *bias, N);
  if (residual) require_elements("matmul", "residual", *residual, T * N);
  const uint64_t out_bytes = T * N * 4;
  if (overlaps(out, out_bytes, x, (x_row + T) * K * 4)) fail("matmul", "out overlaps x");
  if (overlaps(out, out_bytes, w.span, w_bytes)) fail("matmul", "out overlaps the weight");
  if (bias && overlaps(out, out_bytes, *bias, N * 4)) fail("matmul", "out overlaps bias");
  if (residual && overlaps(out, out_bytes, *residual, out_bytes) && residual->offset != out.offset)
    fail("matmul", "residual overlaps out without being out itself");
}

// Workgroups for one dispatch: the vector kernel's groups fold into y past the x limit; the
// tiled kernel's grid is (outputs / BN, rows / BM), kept within the limits by plan_tiled().
vk::Groups groups(const vk::Device& device, const Plan& plan, uint32_t n_count, uint32_t rows) {
  if (plan.tile_bn)
    return {static_cast<uint32_t>(ceil_div(n_count, plan.tile_bn)),
            static_cast<uint32_t>(ceil_div(rows, plan.tile_bm)), 1};
  vk::Groups g = vk::fold_groups(device, ceil_div(n_count, plan.out_per_group), "matmul");
  if (plan.tile_rows) g.z = static_cast<uint32_t>(ceil_div(rows, plan.tile_rows));
  return g;
}

// The kernel a call runs: o.kernel, or for Auto the one its T and the device call for.
MatmulKernel choose_kernel(const KernelPolicy& policy, const MatmulOptions& o, DType dtype,
                           bool texel_ok, bool wide_ok, uint32_t T) {
  if (o.kernel != MatmulKernel::Auto) return o.kernel;
  // On a CPU device the texel matrix-vector kernel, run in passes of kMatmulVecRows rows,
  // beats the shared-memory tiles even for long prompts: llvmpipe's barriers and scalar
  // per-lane loads cost more than reading the weights once per pass.
  if (texel_ok && policy.texel_matmul) return MatmulKernel::VectorTexel;
  // Matrix units take fp16 inputs: fp32 weights keep the fp32 tiles they were asked for.
  if (T > kMatmulVecRows)
    return policy.coop_matrix && dtype == DType::F16 ? MatmulKernel::Coop : MatmulKernel::Tiled;
  return wide_ok ? MatmulKernel::VectorWide : MatmulKernel::Vector;
}

// Picks the kernel and splits a call to fit the device's maxStorageBufferRange (and
// maxTexelBufferElements for texel bindings). A window may hold `room` bytes besides its
// alignment slack and word rounding.
Plan make_plan(const Ops& k, const MatmulOptions& o, const vk::BufferSpan& x, const Weight& w,
               uint32_t T, uint32_t K, uint32_t N, bool argmax = false) {
  const vk::DeviceCaps& caps = k.device().caps();
  const DType dtype = w.dtype;
  const uint64_t texel_align = texel_binding_alignment(caps);
  const bool interleaved = o.layout == WeightLayout::Interleaved;
  const bool aligned = x.offset % texel_align == 0 && w.span.offset % texel_align == 0;
  const bool texel_ok = aligned && (interleaved ? matmul_interleaved_supported(caps, dtype, K)
                                                : matmul_texel_supported(caps, dtype, o.layout, K, N));
  const bool wide_ok = matmul_wide_supported(dtype, o.layout, K, x.offset, w.span.offset);
  const MatmulKernel kernel =
      interleaved ? MatmulKernel::VectorTexel
                  : choose_kernel(k.policy(), o, dtype, texel_ok, wide_ok, T);
  if (kernel == MatmulKernel::VectorWide && !wide_ok)
    fail("matmul", "the wide kernel cannot run K = " + std::to_string(K) +
         " (W must be [N, K] with K in whole 16-byte vectors, x and W spans on 16 bytes)");
  if (kernel == MatmulKernel::VectorTexel && !texel_ok)
    fail("matmul", "the texel-buffer kernel cannot run K = " + std::to_string(K) + ", N = " +
         std::to_string(N) + " on device '" + caps.name +
         "' (no rgba32 storage texel buffers, rows not in whole texels, or x or W not aligned "
         "to minTexelBufferOffsetAlignment)");
  const bool texel = kernel == MatmulKernel::VectorTexel;
  Plan plan;
  plan.align = texel ? texel_align : binding_alignment(caps);
  uint64_t range = caps.max_storage_buffer_range;
  if (texel) range = std::min<uint64_t>(range, uint64_t(caps.max_texel_buffer_elements) * 16);
  const uint64_t room = range - std::min(range, plan.align + 4);
  const bool nk = o.layout != WeightLayout::KN;
  const uint32_t w_row = nk ? K : N, w_rows = nk ? N : K;  // W as rows, split into chunks
  plan.rows = static_cast<uint32_t>(std::min<uint64_t>(T, room / (uint64_t(4) * std::max(K, N))));
  plan.chunk =
      static_cast<uint32_t>(std::min<uint64_t>(w_rows, room / (w_row * dtype_bytes(dtype))));
  // The texel kernel reads x in texels of 4 from k_base, the first row of a chunk of W [K, N].
  if (texel && !nk && plan.chunk < w_rows) plan.chunk = plan.chunk / 4 * 4;
  // Interleaved chunks are whole blocks of rows, padding included.
  if (interleaved)
    plan.chunk = static_cast<uint32_t>(std::min<uint64_t>(room / (uint64_t(K) * dtype_bytes(dtype)),
                                                          interleaved_bytes(dtype, K, N) / K)) /
                 push::MATMUL_BLOCK_ROWS * push::MATMUL_BLOCK_ROWS;
  if (plan.rows == 0 || plan.chunk == 0)
    fail("matmul", "a row of x, out or W does not fit in this device's maxStorageBufferRange (" +
         std::to_string(caps.max_storage_buffer_range) + " bytes)" +
         (texel ? " or maxTexelBufferElements" : ""));
  // Under a driver's loop cap (llvmpipe's), the tiled kernels' k steps per dispatch are bounded:
  // W [K, N] splits into chunks of K that sum into out; W [N, K] cannot split K.
  if (const uint32_t steps = tiled_k_steps(caps, kernel); steps != 0) {
    const uint64_t bk = kernel == MatmulKernel::Tiled ? tile_for(caps).bk : push::MATMUL_COOP_BK;
    if (!nk)
      plan.chunk = static_cast<uint32_t>(std::min<uint64_t>(plan.chunk, steps * bk));
    else if (ceil_div(K, bk) > steps)
      fail("matmul", "K = " + std::to_string(K) + " of a [N, K] weight takes more loop "
                     "iterations than device '" + caps.name + "' runs in one invocation (" +
                     std::to_string(caps.loop_iteration_cap) + ")");
  }
  plan.split_k = !nk && plan.chunk < w_rows;
  if (interleaved)
    plan_interleaved(k, plan, o, dtype, T, argmax);
  else if (kernel == MatmulKernel::Vector)
    plan_vector(k, plan, o, dtype, T);
  else if (kernel == MatmulKernel::VectorWide)
    plan_wide(k, plan, o, dtype, T);
  else if (kernel == MatmulKernel::Coop || kernel == MatmulKernel::CoopEmulated)
    plan_coop(k, plan, o, dtype, N, kernel == MatmulKernel::Coop);
  else if (texel)
    plan_texel(k, plan, o, dtype, T);
  else
    plan_tiled(k, plan, o, dtype, N);
  return plan;
}

}  // namespace

bool matmul_texel_supported(const vk::DeviceCaps& caps, DType dtype, WeightLayout layout,
                            uint32_t K, uint32_t N) {
  const uint32_t per_texel = static_cast<uint32_t>(16 / dtype_bytes(dtype));
  return caps.storage_texel_buffers && caps.max_texel_buffer_elements > 0 && K % 4 == 0 &&
         (layout == WeightLayout::NK ? K : N) % per_texel == 0;
}

bool matmul_wide_supported(DType dtype, WeightLayout layout, uint32_t K, uint64_t x_offset,
                           uint64_t w_offset) {
  return layout == WeightLayout::NK && K % (16 / dtype_bytes(dtype)) == 0 && x_offset % 16 == 0 &&
         w_offset % 16 == 0;
}

bool matmul_interleaved_supported(const vk::DeviceCaps& caps, DType dtype, uint32_t K) {
  return caps.storage_texel_buffers && caps.max_texel_buffer_elements > 0 &&
         K % (16 / dtype_bytes(dtype)) == 0;
}

bool matmul_interleaved_shuffles(const vk::DeviceCaps& caps, uint32_t rows) {
  // Only on CPU devices: there a subgroup is the SIMD group, and a workgroup of its size runs as
  // one full subgroup. A GPU driver may split a workgroup into smaller subgroups unless the
  // pipeline requires full ones (VK_EXT_subgroup_size_control, not requested here), and a
  // shuffle would then read invocations that do not exist.
  return rows > 1 && caps.type == VK_PHYSICAL_DEVICE_TYPE_CPU && caps.subgroup_shuffle &&
         interleaved_workgroup(caps) == caps.subgroup_size;
}

uint64_t interleaved_bytes(DType dtype, uint32_t K, uint32_t N) {
  return ceil_div(N, push::MATMUL_BLOCK_ROWS) * push::MATMUL_BLOCK_ROWS * K * dtype_bytes(dtype);
}

namespace {

// interleave() for elements of type E (uint16_t or uint32_t bits). Both loops write the output
// in order; [K, N] sources are read a row of k at a time, across the block's n.
template <class E>
void interleave_as(E* out, const E* in, WeightLayout from, size_t K, size_t N) {
  constexpr size_t e = 16 / sizeof(E), B = push::MATMUL_BLOCK_ROWS;
  const size_t kts = K / e;
  for (size_t n0 = 0; n0 < N; n0 += B) {
    const size_t rows = std::min(B, N - n0);
    for (size_t kt = 0; kt < kts; kt++, out += B * e)
      for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < e; i++)
          out[r * e + i] = from == WeightLayout::NK ? in[(n0 + r) * K + kt * e + i]
                                                    : in[(kt * e + i) * N + n0 + r];
  }
}

}  // namespace

void interleave(void* dst, const void* src, WeightLayout from, DType dtype, uint32_t K,
                uint32_t N) {
  const size_t size = dtype_bytes(dtype);
  if (K % (16 / size) != 0 || from == WeightLayout::Interleaved)
    fail("matmul", "interleave: K = " + std::to_string(K) + " is not in whole texels");
  std::memset(dst, 0, interleaved_bytes(dtype, K, N));  // the last block's padding rows
  if (size == 2)
    interleave_as(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), from, K, N);
  else
    interleave_as(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), from, K, N);
}

void interleave(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& dst,
                const vk::BufferSpan& src, WeightLayout from, uint32_t K, uint32_t N) {
  const char* op = "interleave";
  if (from == WeightLayout::Interleaved) fail(op, "the source must be [K, N] or [N, K]");
  if (K % 4 != 0) fail(op, "K = " + std::to_string(K) + " is not in whole texels of 4 floats");
  const uint64_t out_bytes = interleaved_bytes(DType::F32, K, N), in_bytes = uint64_t{K} * N * 4;
  require_elements(op, "dst", dst, out_bytes / 4);
  require_elements(op, "src", src, in_bytes / 4);
  if (N == 0 || K == 0) return;
  const vk::DeviceCaps& caps = k.device().caps();
  if (std::max(out_bytes, in_bytes) > caps.max_storage_buffer_range)
    fail(op, "W of " + std::to_string(out_bytes) + " bytes exceeds maxStorageBufferRange");
  const vk::Pipeline& p = k.get(vk::Shader::interleave, {{default_workgroup(caps), 1, 1}, {}});
  const uint32_t layout = from == WeightLayout::NK ? push::MATMUL_NK : push::MATMUL_KN;
  rec.dispatch(p, {dst.sub(0, out_bytes), src.sub(0, in_bytes)}, push::InterleavePush{K, N, layout},
               vk::groups_for(k.device(), p, out_bytes / 16));
}

namespace {

// transpose_kn() for elements of type E: 32 x 32 blocks, so both sides stay in cache.
template <class E>
void transpose_as(E* out, const E* in, size_t K, size_t N) {
  constexpr size_t B = 32;
  for (size_t k0 = 0; k0 < K; k0 += B)
    for (size_t n0 = 0; n0 < N; n0 += B)
      for (size_t n = n0; n < std::min(N, n0 + B); n++)
        for (size_t k = k0; k < std::min(K, k0 + B); k++) out[n * K + k] = in[k * N + n];
}

}  // namespace

void transpose_kn(void* dst, const void* src, DType dtype, uint32_t K, uint32_t N) {
  if (dtype_bytes(dtype) == 2)
    transpose_as(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), K, N);
  else
    transpose_as(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), K, N);
}

void matmul(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& out,
            const vk::BufferSpan& x, const Weight& w, const vk::BufferSpan* bias,
            const vk::BufferSpan* residual, uint32_t T, uint32_t K, uint32_t N,
            const MatmulOptions& o) {
  check_arguments(out, x, w, bias, residual, T, K, N, o);
  const Plan plan = make_plan(k, o, x, w, T, K, N);
  const uint64_t align = plan.align;
  const bool nk = o.layout != WeightLayout::KN;
  const bool interleaved = o.layout == WeightLayout::Interleaved;
  const uint32_t w_row = nk ? K : N, w_rows = nk ? N : K;
  const uint32_t chunks = static_cast<uint32_t>(ceil_div(w_rows, plan.chunk));
  const bool in_place =
      residual && residual->buffer == out.buffer && residual->offset == out.offset;
  if (o.norm && !plan.norm_bindings)
    fail("matmul", "a fused LayerNorm needs interleaved weights or the wide matrix-vector kernel "
                   "(VectorWide, W [N, K])");
  if (o.norm) {
    require_elements("matmul", "gamma", o.norm->gamma, K);
    require_elements("matmul", "beta", o.norm->beta, K);
    if (o.norm->gamma.offset % plan.align != 0 || o.norm->beta.offset % plan.align != 0)
      fail("matmul", "gamma and beta must start on the kernel's binding alignment (" +
                     std::to_string(plan.align) + " bytes)");
  }
  if (plan.split_k && in_place && o.act != Activation::None)
    fail("matmul", 
        "W [K, N] is split over K on this device, which cannot keep an in-place residual "
        "under an activation; pass a residual that is not out");

  // Absent bias and residual bindings are filled with x, which the shader then does not read.
  const vk::BufferSpan bs = bias ? bias->sub(0, uint64_t(N) * 4) : x.sub(0, uint64_t(K) * 4);
  for (uint32_t t0 = 0; t0 < T; t0 += plan.rows) {
    const uint32_t rows = std::min(plan.rows, T - t0);
    const uint64_t xs = (uint64_t(o.x_row) + t0) * K, os = uint64_t(t0) * N;  // first elements
    const Window xw = window(x, xs, uint64_t(rows) * K, 4, align);
    const Window ow = window(out, os, uint64_t(rows) * N, 4, align);
    const Window rw = residual ? window(*residual, os, uint64_t(rows) * N, 4, align) : xw;
    for (uint32_t c = 0; c < chunks; c++) {
      const uint32_t r0 = c * plan.chunk, count = std::min(plan.chunk, w_rows - r0);
      // An interleaved chunk is whole blocks of rows, padding included.
      const uint64_t held = interleaved ? ceil_div(count, push::MATMUL_BLOCK_ROWS) *
                                              push::MATMUL_BLOCK_ROWS
                                        : count;
      const Window ww = window(w.span, uint64_t(r0) * w_row, held * w_row,
                               dtype_bytes(w.dtype), align);
      // A chunk of W [N, K] is a whole block of outputs. Chunks of W [K, N] sum into out: the
      // bias goes on the first, the activation on the last, and the residual on the first when
      // there is no activation (so an in-place residual is read before out is overwritten).
      const bool first = nk || c == 0, last = nk || c + 1 == chunks;
      uint32_t flags = first ? 0 : push::MATMUL_ACCUMULATE;
      if (bias && first) flags |= push::MATMUL_BIAS;
      if (residual && (o.act == Activation::None ? first : last)) flags |= push::MATMUL_RESIDUAL;
      if (interleaved) flags |= static_cast<uint32_t>(o.act) << push::MATMUL_ACT_SHIFT;
      const push::MatmulPush p{
          rows,           K,      N,      nk ? 0 : r0, nk ? K : count, nk ? r0 : 0,
          nk ? count : N, xw.skip, ww.skip, ow.skip, rw.skip,         flags,
          o.norm ? o.norm->eps : 0.0f};
      const vk::Pipeline& pipe = last ? *plan.last : *plan.plain;
      const vk::Groups g = groups(k.device(), plan, p.n_count, rows);
      if (plan.norm_bindings)  // gamma and beta, or x again where no LayerNorm reads them
        rec.dispatch(pipe, {ow.span, xw.span, ww.span, bs, rw.span,
                            o.norm ? o.norm->gamma.sub(0, uint64_t{K} * 4) : xw.span,
                            o.norm ? o.norm->beta.sub(0, uint64_t{K} * 4) : xw.span},
                     p, g);
      else
        rec.dispatch(pipe, {ow.span, xw.span, ww.span, bs, rw.span}, p, g);
    }
  }
}

}  // namespace model::gpu

namespace model::gpu {

uint32_t matmul_argmax_partials(uint32_t N) {
  return static_cast<uint32_t>(ceil_div(N, push::MATMUL_BLOCK_ROWS) * 8);
}

void matmul_argmax(const Ops& k, vk::Recorder& rec, const vk::BufferSpan& partials,
                   const vk::BufferSpan& x, const Weight& w, uint32_t K, uint32_t N,
                   uint32_t x_row) {
  const MatmulOptions o{WeightLayout::Interleaved, Activation::None, MatmulKernel::Auto, x_row};
  if (K == 0 || N == 0) fail("matmul", "K and N must be positive");
  if (N > (1u << 24)) fail("matmul", "argmax ids travel as floats, exact up to 2^24 outputs");
  require_elements("matmul argmax", "partials", partials, 2 * uint64_t{matmul_argmax_partials(N)});
  require_elements("matmul argmax", "x", x, (uint64_t{x_row} + 1) * K);
  require_elements("matmul argmax", "w", w.span, interleaved_bytes(w.dtype, K, N), 1);
  const Plan plan = make_plan(k, o, x, w, 1, K, N, true);
  const Window xw = window(x, uint64_t{x_row} * K, K, 4, plan.align);
  const Window pw = window(partials, 0, 2 * uint64_t{matmul_argmax_partials(N)}, 4, plan.align);
  for (uint32_t r0 = 0; r0 < N; r0 += plan.chunk) {
    const uint32_t count = std::min(plan.chunk, N - r0);
    const uint64_t held = ceil_div(count, push::MATMUL_BLOCK_ROWS) * push::MATMUL_BLOCK_ROWS;
    const Window ww = window(w.span, uint64_t{r0} * K, held * K, dtype_bytes(w.dtype), plan.align);
    const push::MatmulPush p{1, K, N, 0, K, r0, count, xw.skip, ww.skip, pw.skip, 0, 0, 0.0f};
    const vk::BufferSpan unused = xw.span;  // bias, residual, gamma, beta: not read
    rec.dispatch(*plan.last, {pw.span, xw.span, ww.span, unused, unused, unused, unused}, p,
                 groups(k.device(), plan, count, 1));
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
