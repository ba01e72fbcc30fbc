// Which kernel runs each op on this device, and how a model stores its weights: the one file
// that answers it. The kernel policy (policy.h) holds what the device's set prefers; each op's
// own file knows what each of its kernels can run (the device's limits, the spans' alignment,
// the shape) and throws where a kernel a call asked for cannot. Here the two meet: for Auto,
// the kernels an op tries, best first, and the first that can run the call runs it. Why each
// preference pays: docs/benchmark.md.
#pragma once
#include <array>
#include <cstdint>

#include "model/ops/gpu/kernels.h"
#include "model/ops/gpu/policy.h"
#include "model/ops/types.h"

namespace model::gpu {

// A few kernels, best first.
template <class Kernel>
class Order {
 public:
  void add(Kernel k) { kernels_[count_++] = k; }
  const Kernel* begin() const { return kernels_.data(); }
  const Kernel* end() const { return kernels_.data() + count_; }
  bool has(Kernel k) const {
    for (Kernel x : *this)
      if (x == k) return true;
    return false;
  }

 private:
  std::array<Kernel, 4> kernels_{};
  uint32_t count_ = 0;
};

// matmul of T rows of x by W of `dtype` in `layout`. The last kernel runs every call.
Order<MatmulKernel> matmul_order(const KernelPolicy& p, DType dtype, WeightLayout layout,
                                 uint32_t T);
// matmul_backward's dW on its texel kernel, where the call allows it.
bool matmul_backward_texel(const KernelPolicy& p);

// attention (and attention_store) of T queries. Portable, the last, runs every call.
Order<AttentionKernel> attention_order(const KernelPolicy& p, uint32_t T);
// attention_store_batch, whose rows attend caches of their own: Texel, Split, or Auto where the
// policy runs neither for this cache type (the batch cannot run).
AttentionKernel attention_batch_kernel(const KernelPolicy& p, DType cache);
// Training's attention_sequences and attention_backward on their texel kernels, where the call
// allows it.
bool attention_sequences_texel(const KernelPolicy& p);
// Whether a model's passes give attention scratch (the split kernel's partial results, the tiled
// kernel's key ranges): where the policy decodes with either, and for a batch of slots over fp16
// caches, which only the split kernel reads at once.
bool attention_needs_scratch(const KernelPolicy& p, uint32_t slots, DType cache);

// layernorm and layernorm_backward. Portable, the last, runs every call.
Order<LayerNormKernel> layernorm_order(const KernelPolicy& p);

// activation, activation_backward, add and cross_entropy on their *_texel kernels, where the
// call allows it.
bool elementwise_texel(const KernelPolicy& p);

// A LayerNorm and the matmul after it (the graph's norm_linear step): run apart (the LayerNorm
// into scratch), or fused into matmul_interleaved or matmul_vec_wide, which normalise each row
// of x as they read it. `wide_fits`: matmul_wide_supported for the call.
enum class NormLinear { Apart, Interleaved, Wide };
NormLinear norm_linear(const KernelPolicy& p, WeightLayout layout, uint64_t w_bytes, uint32_t T,
                       uint32_t in_row, bool wide_fits);

// The layout a weight matrix is stored in on the device, given the checkpoint's (`from`: KN or
// NK), whether a matmul reads it and whether matmul_interleaved could
// (`interleaved_fits`: matmul_interleaved_supported, texel-aligned arenas).
WeightLayout weight_layout(const KernelPolicy& p, WeightLayout from, bool matmul_reads,
                           bool interleaved_fits);
// Whether training keeps interleaved copies of the matrices the linears read, repacked on the
// device when the weights change (where the call allows it: storage texel buffers, aligned).
bool training_packs_weights(const KernelPolicy& p);
// Whether greedy decoding takes the head's argmax in its own pass (gpu::matmul_argmax) rather
// than writing the logits: an interleaved head, ids that travel as floats.
bool argmax_head(WeightLayout head, uint32_t n_vocab);

}  // namespace model::gpu
