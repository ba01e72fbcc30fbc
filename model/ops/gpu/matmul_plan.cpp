#include "model/ops/gpu/matmul_plan.h"

#include <algorithm>
#include <string>

#include "model/ops/gpu/choose.h"
#include "model/ops/gpu/interleave.h"
#include "vk/check.h"

namespace model::gpu {
namespace {

uint32_t floor_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p <= v / 2) p *= 2;
  return p;
}

using vk::ceil_div;

constexpr uint32_t kCoopWorkgroup = push::MATMUL_COOP_LANES * push::MATMUL_COOP_SUBGROUPS;

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
// where a sum over K stopped (37,445 of 50,257 terms). The cooperative-matrix emulation's step
// is counted as its loops of units (each gathered element by element, 8 at a time, where x or W
// is not in whole vectors) and its BK emulated products. Half the cap leaves room for a compiler
// that unrolls less.
uint32_t tiled_k_steps(const vk::DeviceCaps& caps, MatmulKernel kernel) {
  if (caps.loop_iteration_cap == 0 ||
      (kernel != MatmulKernel::Tiled && kernel != MatmulKernel::CoopEmulated))
    return 0;
  uint32_t step;
  if (kernel == MatmulKernel::CoopEmulated) {
    const uint32_t units = push::MATMUL_COOP_LARGE * push::MATMUL_COOP_BK / 8 / kCoopWorkgroup;
    step = 1 + 2 * (units + 1) * 9 + (push::MATMUL_COOP_BK + 1);
  } else {
    const Tile& t = tile_for(caps);
    const uint32_t threads = (t.bn / t.tn) * (t.bm / t.tm);
    step = static_cast<uint32_t>(1 + (ceil_div(t.bm * t.bk, threads) + 1) +
                                 (ceil_div(t.bk * t.bn, threads) + 1) + (t.bk + 1));
  }
  return std::max(1u, caps.loop_iteration_cap / 2 / step);
}

// plan.last with the call's activation and, where chunks of W [K, N] sum into out before it
// applies, plan.plain without: spec(activation) gives each one's specialization.
template <class Spec>
void set_pipelines(const Ops& k, MatmulPlan& plan, const MatmulOptions& o, vk::Shader name,
                   const Spec& spec) {
  plan.last = &k.get(name, spec(o.act));
  plan.plain = plan.split_k && o.act != Activation::None ? &k.get(name, spec(Activation::None))
                                                         : plan.last;
}

// The tiled kernels' grid: x over the chunk's outputs in tiles of bn, y over the pass's rows in
// tiles of bm; chunks of W [N, K] and passes shrink to fit the device's workgroup counts.
void fit_tiles(const vk::DeviceCaps& caps, MatmulPlan& plan, const MatmulOptions& o, uint32_t N,
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
void plan_vector(const Ops& k, MatmulPlan& plan, const MatmulOptions& o, DType dtype, uint32_t T) {
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
void plan_texel(const Ops& k, MatmulPlan& plan, const MatmulOptions& o, DType dtype, uint32_t T) {
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
void plan_wide(const Ops& k, MatmulPlan& plan, const MatmulOptions& o, DType dtype, uint32_t T) {
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


// The interleaved kernel: 8 or kInterleavedLanes invocations per block of rows of W (see
// matmul_interleaved.glsl), no shared memory, so only the workgroup size limits apply.
void plan_interleaved(const Ops& k, MatmulPlan& plan, const MatmulOptions& o, DType dtype,
                      uint32_t T, bool argmax) {
  const vk::DeviceCaps& caps = k.device().caps();
  // Tiles of 1, 2, 4, 8 or kInterleavedRows rows: a 16-row tile compiles four times as long as
  // an 8-row one on lavapipe with a cold cache (2 s against 0.5 s) and, on the prompts that
  // would get it, gives half as many workgroups to spread over the threads.
  // Below two whole kInterleavedRows tiles (T < 64) the 8-row tile serves too: the 32-row tile
  // (4 lanes) took about 4 s to compile on lavapipe with a cold cache, which a one-sentence
  // `embed` of 17 to 63 tokens paid before its first result (6 s against 1.8 s for 13 tokens),
  // and at those T it covers up to 47% padding rows.
  uint32_t rows = 1;
  while (rows < std::min(T, kInterleavedRows)) rows *= 2;
  if (rows == 16 || (rows == kInterleavedRows && T < 2 * kInterleavedRows)) rows = 8;
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

void plan_tiled(const Ops& k, MatmulPlan& plan, const MatmulOptions& o, DType dtype, uint32_t N) {
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

// The cooperative-matrix tiles: on the matrix units, or (CoopEmulated) emulated. 128 x 128 where
// that grid still has the tuning's coop_large_groups workgroups, else 64 x 64.
void plan_coop(const Ops& k, MatmulPlan& plan, const MatmulOptions& o, DType dtype, uint32_t N,
               bool hardware) {
  const vk::DeviceCaps& caps = k.device().caps();
  if (const std::string why = matmul_coop_unsupported(caps, hardware); !why.empty())
    fail("matmul", why);
  const uint32_t large = push::MATMUL_COOP_LARGE;
  const bool big = ceil_div(plan.rows, large) * ceil_div(N, large) >=
                   k.policy().tuning.coop_large_groups;
  const uint32_t side = big ? large : push::MATMUL_COOP_SMALL;
  fit_tiles(caps, plan, o, N, side, side);
  const auto spec = [&](Activation a) {
    return vk::Specialization{{kCoopWorkgroup, 1, 1},
                               {static_cast<uint32_t>(o.layout), static_cast<uint32_t>(dtype),
                                static_cast<uint32_t>(a)}};
  };
  const vk::Shader shader =
      hardware ? (big ? vk::Shader::matmul_coop_large : vk::Shader::matmul_coop)
               : (big ? vk::Shader::matmul_coop_emulated_large : vk::Shader::matmul_coop_emulated);
  set_pipelines(k, plan, o, shader, spec);
}

// The kernel a call runs: o.kernel, or for Auto the first of choose.h's order that fits.
MatmulKernel choose_kernel(const KernelPolicy& policy, const MatmulOptions& o, DType dtype,
                           bool texel_ok, bool wide_ok, uint32_t T) {
  if (o.layout == WeightLayout::Interleaved) return MatmulKernel::VectorTexel;
  if (o.kernel != MatmulKernel::Auto) return o.kernel;
  const auto fits = [&](MatmulKernel k) {
    return k == MatmulKernel::VectorTexel ? texel_ok : k == MatmulKernel::VectorWide ? wide_ok : true;
  };
  for (MatmulKernel k : matmul_order(policy, dtype, o.layout, T))
    if (fits(k)) return k;
  return MatmulKernel::Vector;  // unreachable: the order ends in a kernel that runs every call
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


uint32_t interleaved_workgroup(const vk::DeviceCaps& caps) {
  return std::max(8u, floor_pow2(std::min({caps.max_workgroup_invocations,
                                           caps.max_workgroup_size[0],
                                           std::clamp(caps.subgroup_size, 8u, 32u)})));
}

// Picks the kernel and splits a call to fit the device's maxStorageBufferRange (and
// maxTexelBufferElements for texel bindings). A window may hold `room` bytes besides its
// alignment slack and word rounding.
MatmulPlan plan_matmul(const Ops& k, const MatmulOptions& o, const vk::BufferSpan& x,
                       const Weight& w, uint32_t T, uint32_t K, uint32_t N, bool argmax) {
  const vk::DeviceCaps& caps = k.device().caps();
  const DType dtype = w.dtype;
  const uint64_t texel_align = texel_binding_alignment(caps);
  const bool interleaved = o.layout == WeightLayout::Interleaved;
  const bool aligned = x.offset % texel_align == 0 && w.span.offset % texel_align == 0;
  const bool texel_ok = aligned && (interleaved ? matmul_interleaved_supported(caps, dtype, K)
                                                : matmul_texel_supported(caps, dtype, o.layout, K, N));
  const bool wide_ok = matmul_wide_supported(dtype, o.layout, K, x.offset, w.span.offset);
  const MatmulKernel kernel = choose_kernel(k.policy(), o, dtype, texel_ok, wide_ok, T);
  if (kernel == MatmulKernel::VectorWide && !wide_ok)
    fail("matmul", "the wide kernel cannot run K = " + std::to_string(K) +
         " (W must be [N, K] with K in whole 16-byte vectors, x and W spans on 16 bytes)");
  if (kernel == MatmulKernel::VectorTexel && !texel_ok)
    fail("matmul", "the texel-buffer kernel cannot run K = " + std::to_string(K) + ", N = " +
         std::to_string(N) + " on device '" + caps.name +
         "' (no rgba32 storage texel buffers, rows not in whole texels, or x or W not aligned "
         "to minTexelBufferOffsetAlignment)");
  const bool texel = kernel == MatmulKernel::VectorTexel;
  MatmulPlan plan;
  plan.align = texel ? texel_align : binding_alignment(caps);
  // The cooperative-matrix kernel binds x and W as 16-byte vectors.
  if (kernel == MatmulKernel::Coop || kernel == MatmulKernel::CoopEmulated)
    plan.align = std::max<uint64_t>(plan.align, 16);
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

// Workgroups for one dispatch: the vector kernel's groups fold into y past the x limit; the
// tiled kernel's grid is (outputs / BN, rows / BM), kept within the limits by plan_tiled().
vk::Groups matmul_groups(const vk::Device& device, const MatmulPlan& plan, uint32_t n_count,
                         uint32_t rows) {
  if (plan.tile_bn)
    return {static_cast<uint32_t>(ceil_div(n_count, plan.tile_bn)),
            static_cast<uint32_t>(ceil_div(rows, plan.tile_bm)), 1};
  vk::Groups g = vk::fold_groups(device, ceil_div(n_count, plan.out_per_group), "matmul");
  if (plan.tile_rows) g.z = static_cast<uint32_t>(ceil_div(rows, plan.tile_rows));
  return g;
}

}  // namespace model::gpu
