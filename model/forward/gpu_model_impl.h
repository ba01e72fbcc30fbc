// The GPU model's private parts: the GpuModel class behind make_gpu_model, and the GpuBackend
// whose steps model/forward/graph.h drives. gpu_model.cpp defines the model (weights, state,
// passes, slots), gpu_backend.cpp the ops each step records; nothing else includes this.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"
#include "model/forward/graph.h"
#include "model/forward/packer.h"
#include "model/ops/gpu/common.h"
#include "model/ops/gpu/matmul.h"
#include "model/ops/gpu/policy.h"

namespace model {

// The device's kernel policy, after the one-time self-test of its matrix units where the policy
// would use them: on a mismatch the note becomes a warning and prompts take the scalar tiles.
gpu::KernelPolicy checked_policy(const vk::Device& device, std::vector<std::string>& warnings);

class GpuModel;

using GpuLinear = Linear<const gpu::Weight*>;
using GpuNorm = Norm<const gpu::Weight*>;

// The backend graph.h drives: each step records its ops into the model's one command buffer.
struct GpuBackend {
  GpuModel& m;
  const vk::BufferSpan& buf(Buf b) const;
  void embed(uint32_t T, uint32_t pos);
  void layernorm(Buf out, Buf in, const GpuNorm& n, uint32_t T);
  void linear(Buf out, Buf in, const GpuLinear& l, uint32_t T, const Epilogue& e = {},
              uint32_t in_row = 0, gpu::MatmulKernel kernel = gpu::MatmulKernel::Auto,
              const gpu::MatmulNorm* norm = nullptr);
  void norm_linear(Buf out, Buf in, const GpuNorm& n, const GpuLinear& l, uint32_t T,
                   const Epilogue& e = {}, uint32_t in_row = 0);
  void attention_store(uint32_t layer, uint32_t T, uint32_t pos);
  void argmax_head(Buf in, const GpuLinear& l, uint32_t row);
  void tap(uint32_t layer, uint32_t T);
};

class GpuModel final : public Model {
 public:
  GpuModel(const Checkpoint& ckpt, const vk::Device& device, const GpuModelOptions& o)
      : config_(ckpt.config()),
        device_(device),
        precision_(o.precision),
        kv_cache_(o.kv_cache == Precision::F16 ? DType::F16 : DType::F32),
        split_layers_(o.split_layers),
        replay_(o.replay),
        rates_(o.rates),
        slots_(o.slots),
        slot_ctx_(o.slot_context ? o.slot_context : ckpt.config().n_ctx),
        kernels_(device.kernels()),
        policy_(checked_policy(device, warnings_)),
        weights_(device, "weights"),
        state_(device, "activations"),
        io_(device, "io"),
        params_(device, "pass parameters"),
        rec_(device, o.timestamps) {
    check_slots();
    upload_weights(ckpt, o.on_upload);
    plan_state();
  }

  const Config& config() const override { return config_; }
  // "llvmpipe (...), cpu kernels": the device and the kernel set it runs.
  std::string device_name() const override {
    return device_.caps().name + ", " + vk::kernel_set_name(policy_.set) + " kernels";
  }
  Precision precision() const override { return precision_; }
  const vk::RecorderStats& stats() const { return stats_; }
  double wait_timeout() const { return rec_.timeout(); }
  std::vector<vk::DispatchTime> timings() const { return rec_.timings(); }
  const gpu::KernelPolicy& policy() const { return policy_; }

 protected:
  void run(std::span<const int32_t> ids, bool all_rows, uint32_t k, std::vector<float>& logits,
           std::vector<int32_t>& top_ids) override {
    active_slot_ = 0;
    run_at(length(), ids, all_rows, k, logits, top_ids);
  }

 public:
  uint32_t slots() const override { return slots_; }
  uint32_t slot_context() const override { return slots_ > 1 ? slot_ctx_ : Model::slot_context(); }
  uint32_t slot_length(uint32_t slot) const override;
  void slot_reset(uint32_t slot) override;
  std::vector<float> slot_prefill(uint32_t slot, std::span<const int32_t> ids,
                                  bool all_rows) override;
  std::vector<float> slot_decode(std::span<const SlotToken> rows) override;

 public:
  size_t prepare(uint32_t prompt_tokens, uint32_t max_new, uint32_t k,
                 const vk::CompileProgress& progress) override;

 private:
  // Records (dry: only names the pipelines, Recorder::begin_dry) a forward pass over T tokens at
  // `pos`, and the top-k after it where the head asks for one; returns that head. A prompt
  // chunk before the `last` computes no head unless all rows are asked for.
  Head record_pass(uint32_t T, uint32_t pos, bool all_rows, uint32_t k, bool dry,
                   bool last = true);
  // Submits that pass: where `replayable` (and replay is on), a dry recording first, and where it
  // matches the last real one, that one again (Recorder::replay); else recorded anew.
  Head submit_pass(bool replayable, uint32_t T, uint32_t pos, bool all_rows, uint32_t k,
                   bool last = true);
  // run() at `pos` in the active slot's cache.
  void run_at(uint32_t pos, std::span<const int32_t> ids, bool all_rows, uint32_t k,
              std::vector<float>& logits, std::vector<int32_t>& top_ids);
  void check_slots() const;
  // A slot's cache of a layer, [slot rows, C]: slot `slot` of the layer's caches, slot_stride_
  // bytes apart.
  vk::BufferSpan k_cache(uint32_t layer, uint32_t slot) const {
    return state_.span(k_cache_[layer]).sub(slot * slot_stride_, slot_bytes_);
  }
  vk::BufferSpan v_cache(uint32_t layer, uint32_t slot) const {
    return state_.span(v_cache_[layer]).sub(slot * slot_stride_, slot_bytes_);
  }
  // Runs the pass of ids at `pos` (one chunk of run()'s) and waits for it.
  Head run_pass(std::span<const int32_t> ids, uint32_t pos, bool all_rows, uint32_t k, bool last);
  // Whether passes are cut by their estimated cost (on a GPU, or wherever the options give
  // rates), and at which rates.
  bool automatic() const {
    return !split_layers_ && (rates_ || device_.caps().type != VK_PHYSICAL_DEVICE_TYPE_CPU);
  }
  // The options' rates as given (tests fix them); else the nominal ones scaled by the speed
  // this model's passes have shown (calibrated(), model/forward/submissions.h).
  SubmissionRates rates() const { return rates_ ? *rates_ : calibrated(SubmissionRates{}, speed_); }
  DType weight_dtype() const { return precision_ == Precision::F16 ? DType::F16 : DType::F32; }
  // The passes run() makes of T tokens at pos: one, or a long prompt's chunks (prompt_chunks).
  std::vector<uint32_t> chunks(uint32_t T, uint32_t pos, bool all_rows) const {
    return automatic() ? prompt_chunks(config_, T, pos, weight_dtype(), rates(), all_rows)
                       : std::vector<uint32_t>{T};
  }
  friend struct GpuBackend;
  WeightLayout matrix_layout(const ExpectedTensor& e, DType dtype, WeightLayout& from) const;
  void upload_weights(const Checkpoint& ckpt, const UploadProgress& on_upload);
  void plan_state();
  void ensure_logits(uint32_t rows);
  void ensure_taps();
  void ensure_attention_taps(uint32_t T, uint32_t L);

  Config config_;
  const vk::Device& device_;
  Precision precision_;
  DType kv_cache_;         // GpuModelOptions::kv_cache
  uint32_t split_layers_;  // blocks per submission; 0 = by the estimated cost
  bool replay_;            // GpuModelOptions::replay
  std::optional<SubmissionRates> rates_;
  double speed_ = 1;  // the best observed_speed() of a pass so far
  uint32_t slots_, slot_ctx_;      // GpuModelOptions::slots, slot_context
  uint32_t active_slot_ = 0;        // whose cache this pass uses
  std::vector<uint32_t> slot_len_;  // tokens cached per slot (slot 0's is Model::length())
  // A batch of slot_decode: row b is one token of rows[b].slot at that slot's length.
  struct Batch {
    std::span<const SlotToken> rows;
    std::vector<uint32_t> pos;
  };
  const Batch* batch_ = nullptr;
  // What a slot's pass changes for its duration (a slot's cache, or a batch, and no taps: those
  // are logits()'s), put back however the pass ends.
  struct SlotPass {
    SlotPass(GpuModel& model, uint32_t slot, const Batch* batch)
        : m(model), taps(model.taps_on_), attention(model.attention_on_) {
      m.active_slot_ = slot, m.batch_ = batch, m.taps_on_ = m.attention_on_ = false;
    }
    ~SlotPass() { m.active_slot_ = 0, m.batch_ = nullptr, m.taps_on_ = taps, m.attention_on_ = attention; }
    SlotPass(const SlotPass&) = delete;
    SlotPass& operator=(const SlotPass&) = delete;
    GpuModel& m;
    const bool taps, attention;
  };
  uint32_t pass_split_ = 0;  // this pass's blocks per submission; 0 = the whole pass in one
  bool head_apart_ = false;  // this pass's head is a submission of its own
  vk::Kernels& kernels_;  // the device's, shared with its other models
  gpu::KernelPolicy policy_;  // the device's
  vk::RecorderStats stats_;

  Packer weights_;
  std::map<std::string, gpu::Weight> tensors_;
  ModelWeights<const gpu::Weight*> w_;

  Packer state_;  // activations and the KV cache
  size_t x_, h_, qkv_, att_, fc_;
  std::vector<size_t> k_cache_, v_cache_;  // [layer]: [slots, slot rows, C], slot_stride_ apart
  uint64_t slot_bytes_ = 0, slot_stride_ = 0;
  // Batches run attention_store_batch (the same dispatches for any number of rows) where it
  // can, else each row's own.
  bool batch_attention_ = false;
  Packer io_;      // host-visible: the best candidates out
  Packer params_;  // host-written before each pass: the ids and the position
  size_t ids_, step_, top_ids_, top_values_, scratch_;
  size_t batch_rows_ = 0;        // a batch's {pos, cache texel} per row (attention_store_batch)
  // Partial results of split-K attention (decoding) and of the tiled kernel's key ranges, where
  // they may run.
  std::optional<size_t> split_;
  size_t partials_;  // greedy decoding: the head's argmax partials (gpu::matmul_argmax)

  std::unique_ptr<vk::Arena> logits_arena_;  // [rows, V], grown when more rows are asked for
  vk::BufferSpan logits_;
  uint32_t logit_rows_ = 0;
  std::unique_ptr<vk::Arena> taps_arena_;
  std::vector<vk::BufferSpan> tap_spans_;  // [layer][n_ctx, C]
  // The attention tap of this pass: [layer][H, T, L] for the tapped layers, else empty spans.
  std::vector<std::unique_ptr<vk::Arena>> probs_arenas_;
  std::vector<vk::BufferSpan> probs_spans_;
  // Last: destroyed first, so a pending submission settles before the memory it uses is freed.
  vk::Recorder rec_;
};

}  // namespace model
