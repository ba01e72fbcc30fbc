// How matmul carries out one call: the kernel (choose.h's choice, or the one asked for), its
// pipelines and workgroup shape, and the blocks x, out and W split into to fit the device's
// binding limits. matmul() and matmul_argmax() record what the plan says.
#pragma once
#include <cstdint>

#include "model/ops/gpu/matmul.h"

namespace model::gpu {

// How one call is carried out: the pipeline(s), and the blocks x, out and W are split into.
struct MatmulPlan {
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

// The plan for out [T, N] = x [T, K] W: for matmul_argmax (`argmax`), the interleaved kernel's
// argmax variant.
MatmulPlan plan_matmul(const Ops& k, const MatmulOptions& o, const vk::BufferSpan& x,
                       const Weight& w, uint32_t T, uint32_t K, uint32_t N, bool argmax = false);
// Workgroups for one dispatch of n_count outputs over `rows` rows.
vk::Groups matmul_groups(const vk::Device& device, const MatmulPlan& plan, uint32_t n_count,
                         uint32_t rows);
// matmul_interleaved's workgroup on this device.
uint32_t interleaved_workgroup(const vk::DeviceCaps& caps);

}  // namespace model::gpu
