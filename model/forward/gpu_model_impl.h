// The GPU model's private parts: the GpuModel class behind make_gpu_model, and the GpuBackend
// whose steps model/forward/graph.h drives. gpu_model.cpp defines the model (weights, state,
// passes), gpu_model_slots.cpp its slots and source caches, gpu_model_prepare.cpp its compiling
// ahead, gpu_backend.cpp the ops each step records; nothing else includes this.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"
#include "model/forward/encoder.h"
#include "model/forward/graph.h"
#include "model/forward/packer.h"
#include "model/ops/gpu/common.h"
#include "model/ops/gpu/matmul.h"
#include "model/ops/gpu/coop_check.h"

namespace model {

using GpuLinear = Linear<const gpu::Weight*>;
using GpuNorm = Norm<const gpu::Weight*>;

// A batch of slot_decode: row b is one token of rows[b].slot at that slot's length.
struct Batch {
  std::span<const Model::SlotToken> rows;
  std::vector<uint32_t> pos;
};

// An encoder's batch (GpuModel::encode_batch): sequence b at rows [b period, b period +
// lens[b]), the rows up to the next period padding; each sequence's queries see its own keys only.
struct Segments {
  uint32_t period = 0;
  std::vector<uint32_t> lens;
};

// One pass, decided whole before it is recorded (GpuModel::plan_pass) and handed to the backend
// as a value: nothing about a pass is left in the model for the backend to read back.
struct Pass {
  uint32_t T = 0, pos = 0;  // T tokens at [pos, pos + T); a batch: one row per slot, each at
                            // its own position (Batch::pos), pos the furthest
  Head head = Head::LastRow;
  uint32_t slot = 0;             // whose cache: slot_prefill's slot, else 0
  uint32_t source = 0;           // the source pass's source cache (record_source)
  const Batch* batch = nullptr;  // slot_decode's rows, each in its slot's cache
  const Segments* segments = nullptr;  // an encoder's batch of sequences (T = their rows)
  bool taps = false;             // X after every block into GpuState::taps (logits() only)
  bool attention_taps = false;   // the tapped layers' softmax into GpuState::probs
  uint32_t split = 0;            // blocks per submission; 0: the whole pass in one
  bool head_apart = false;       // the head in a submission of its own
  double longest_s = 0;          // the longest submission's expected time (its wait's bound)
};

// What a pass's ops read and write: views of the model's arenas as they are for this pass.
struct GpuState {
  // R rows: n_ctx, or an encoder's batch's (GpuModelOptions::encoder_batch).
  vk::BufferSpan x, h;       // [R, C]
  vk::BufferSpan att;        // [R, A] (A: Config::attn_width())
  vk::BufferSpan qkv;        // [R, 3A]
  vk::BufferSpan fc;         // [R, F]
  vk::BufferSpan gate;       // [R, 2F] (a gated MLP)
  vk::BufferSpan logits;     // [rows, V]
  // [layer]: a layer's caches, [slots, slot rows, A], one slot every slot_stride bytes. An
  // encoder keeps nothing from layer to layer: every layer's is the same [R, A].
  std::vector<vk::BufferSpan> k_cache, v_cache;
  // [layer]: a decoder's source keys and values (cross-attention), [sources, n_ctx, A] fp32,
  // one source cache every source_stride bytes; source cache i holds source_lens[i] rows, and
  // slot s reads source cache source_of[s] (kNoSource: none).
  std::vector<vk::BufferSpan> source_k, source_v;
  uint64_t source_bytes = 0, source_stride = 0;
  std::vector<uint32_t> source_lens, source_of;
  uint64_t slot_bytes = 0, slot_stride = 0;
  DType kv_cache = DType::F32;            // GpuModelOptions::kv_cache
  vk::BufferSpan ids, step, batch_rows;  // written by the host before each pass
  vk::BufferSpan types;                  // an encoder's token types [R], likewise
  vk::BufferSpan partials;               // the argmax head's (gpu::matmul_argmax)
  std::optional<vk::BufferSpan> split;   // the split and tiled attention's scratch
  std::optional<vk::BufferSpan> split_counts;  // the split kernel's block counts (merge fused)
  bool batch_attention = false;          // batches run attention_store_batch
  std::vector<vk::BufferSpan> taps;      // [layer][n_ctx, C] once taps were asked for
  std::vector<vk::BufferSpan> probs;     // [layer][H, T, L]; empty for a layer not tapped
  std::vector<vk::BufferSpan> cross_probs;  // [layer][H, T, S] likewise, cross-attention's
  // A slot's cache of a layer, [slot rows, A].
  vk::BufferSpan k(uint32_t layer, uint32_t slot) const {
    return k_cache[layer].sub(slot * slot_stride, slot_bytes);
  }
  vk::BufferSpan v(uint32_t layer, uint32_t slot) const {
    return v_cache[layer].sub(slot * slot_stride, slot_bytes);
  }
  // A source cache of a layer, [n_ctx, A].
  vk::BufferSpan sk(uint32_t layer, uint32_t source) const {
    return source_k[layer].sub(source * source_stride, source_bytes);
  }
  vk::BufferSpan sv(uint32_t layer, uint32_t source) const {
    return source_v[layer].sub(source * source_stride, source_bytes);
  }
};

// GpuState::source_of for a slot without a source.
inline constexpr uint32_t kNoSource = ~0u;

// The backend graph.h drives: each step records its ops into the recorder, on the state and
// for the pass it is given.
struct GpuBackend {
  const gpu::Ops& k;
  vk::Recorder& rec;
  const Config& c;
  const ModelWeights<const gpu::Weight*>& w;
  const GpuState& s;
  const Pass& pass;
  const vk::BufferSpan& buf(Buf b) const;
  void embed(Buf out, uint32_t T, uint32_t pos);
  void layernorm(Buf out, Buf in, const GpuNorm& n, uint32_t T);
  void gated_activation(Buf out, Buf in, uint32_t T, Activation act);
  void linear(Buf out, Buf in, const GpuLinear& l, uint32_t T, const Epilogue& e = {},
              uint32_t in_row = 0, gpu::MatmulKernel kernel = gpu::MatmulKernel::Auto,
              const gpu::MatmulNorm* norm = nullptr);
  void norm_linear(Buf out, Buf in, const GpuNorm& n, const GpuLinear& l, uint32_t T,
                   const Epilogue& e = {}, uint32_t in_row = 0);
  void attention_store(uint32_t layer, uint32_t T, uint32_t pos);
  void source_store(uint32_t layer, const GpuLinear& k, const GpuLinear& v, uint32_t S);
  void cross_attention(uint32_t layer, uint32_t T);
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
        sources_(o.sources),
        encoder_batch_(std::max<uint32_t>(1, o.encoder_batch)),
        ops_(gpu::checked_ops(device)),
        weights_(device, "weights"),
        state_(device, "activations"),
        io_(device, "io"),
        params_(device, "pass parameters"),
        rec_(device, o.timestamps) {
    // The matrix units' self-test, where it failed: prompts take the scalar tiles.
    if (!ops_.note().empty()) warnings_.push_back(ops_.note());
    check_slots();
    upload_weights(ckpt, o.on_upload);
    plan_state();
  }

  const Config& config() const override { return config_; }
  // "llvmpipe (...), cpu kernels": the device and the kernel set it runs.
  std::string device_name() const override {
    return device_.caps().name + ", " + vk::kernel_set_name(ops_.policy().set) + " kernels";
  }
  Precision precision() const override { return precision_; }
  bool matrix_units() const override { return ops_.policy().coop_matrix; }
  const vk::RecorderStats& stats() const { return stats_; }
  double wait_timeout() const { return rec_.timeout(); }
  std::vector<vk::DispatchTime> timings() const { return rec_.timings(); }
  const gpu::KernelPolicy& policy() const { return ops_.policy(); }

  // An encoder's pass (EncoderOver<GpuModel>): the whole sequence from position 0, its hidden
  // states and (with `head`) its head's output read back.
  void encode(std::span<const int32_t> ids, std::span<const int32_t> types, bool head,
              Encoded& out);
  // Encoder::encode_batch's passes: the sequences longest first, as many a pass as the
  // activations hold (encoder_batch at most), each padded to the pass's first's length rounded
  // up to whole segment_rows_, and a pass to more than gpu::kMatmulVecRows rows: a sequence's
  // hidden states are the same bits whichever sequences share its pass.
  void encode_batch(std::span<const EncoderInput> inputs, std::vector<std::vector<float>>& hidden);

 protected:
  void run_source(std::span<const float> hidden, uint32_t S) override;
  void run_slot_source(uint32_t slot, std::span<const float> hidden, uint32_t S) override;
  void run(std::span<const int32_t> ids, bool all_rows, uint32_t k, std::vector<float>& logits,
           std::vector<int32_t>& top_ids) override {
    run_at(std::nullopt, length(), ids, all_rows, k, logits, top_ids);
  }

 public:
  uint32_t slots() const override { return slots_; }
  uint32_t slot_context() const override { return slots_ > 1 ? slot_ctx_ : Model::slot_context(); }
  uint32_t slot_length(uint32_t slot) const override;
  uint32_t slot_source_length(uint32_t slot) const override;
  uint32_t slot_sources() const override { return sources_; }
  void slot_reset(uint32_t slot) override;
  void slot_truncate(uint32_t slot, uint32_t n) override;
  std::vector<float> slot_prefill(uint32_t slot, std::span<const int32_t> ids,
                                  bool all_rows) override;
  std::vector<float> slot_decode(std::span<const SlotToken> rows) override;
  void slot_copy(std::span<const SlotCopy> copies) override;

 public:
  size_t prepare(uint32_t prompt_tokens, uint32_t max_new, uint32_t k, uint32_t window,
                 const vk::CompileProgress& progress) override;
  size_t prepare_source(uint32_t S, uint32_t max_new, uint32_t k, bool own_sources,
                        const vk::CompileProgress& progress) override;
  // An encoder's: compiles what encode() of T tokens uses, without its head where not `head`.
  size_t prepare_encode(uint32_t T, bool head, const vk::CompileProgress& progress);

 private:
  // The pass of T tokens at `pos`: its head (none for a prompt chunk before the `last` unless
  // all rows are asked for; the top-k after it where k asks for one) and its submissions. Its
  // slot, batch and taps are the caller's to set.
  Pass plan_pass(uint32_t T, uint32_t pos, bool all_rows, uint32_t k, bool last = true) const;
  // Records p (dry: only names the pipelines, Recorder::begin_dry), and the top-k after it.
  void record_pass(const Pass& p, uint32_t k, bool dry);
  // Records the source pass of S rows into source cache `source` (dry: as record_pass).
  void record_source(uint32_t source, uint32_t S, bool dry);
  // The source pass of S rows into source cache `source`, and its run.
  void store_source(uint32_t source, std::span<const float> hidden, uint32_t S);
  // Records slot_copy's copies, copies[i] of rows[i] cached rows (dry: as record_pass).
  void record_copies(std::span<const SlotCopy> copies, std::span<const uint32_t> rows, bool dry);
  // prepare()'s dry recordings: the passes generate() runs (see there).
  void record_generate(uint32_t prompt_tokens, uint32_t max_new, uint32_t k, uint32_t window);
  // Compiles, in parallel, the pipelines that `record`'s dry recordings name and that are not
  // made yet; returns how many.
  size_t compile_ahead(const std::function<void()>& record, const vk::CompileProgress& progress);
  // Submits p: where `replayable` (and replay is on), a dry recording first, and where it
  // matches the last real one, that one again (Recorder::replay); else recorded anew.
  void submit_pass(const Pass& p, uint32_t k, bool replayable);
  // run() at `pos` in a slot's cache, or (no slot) the model's own pass, which may tap.
  void run_at(std::optional<uint32_t> slot, uint32_t pos, std::span<const int32_t> ids,
              bool all_rows, uint32_t k, std::vector<float>& logits, std::vector<int32_t>& top_ids);
  void check_slots() const;
  // Runs the pass of ids at `pos` (one chunk of run_at's) and waits for it.
  Head run_pass(std::optional<uint32_t> slot, std::span<const int32_t> ids, uint32_t pos,
                bool all_rows, uint32_t k, bool last);
  // What the host writes before a pass of ids at `pos` (an encoder's token types too), once the
  // last submission is done with them.
  void write_params(std::span<const int32_t> ids, std::span<const int32_t> types, uint32_t pos);
  // The state a pass's ops see now.
  GpuState pass_state() const;
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
  uint32_t sources_;               // GpuModelOptions::sources
  uint32_t encoder_batch_;         // GpuModelOptions::encoder_batch
  uint32_t rows_ = 0;              // the activations' rows: n_ctx, or an encoder batch's
  // A batch's sequences start at multiples of this many rows, so that each one's views of the
  // activations and the cache sit on the device's binding alignment.
  uint32_t segment_rows_ = 1;
  std::vector<uint32_t> slot_len_;  // tokens cached per slot (slot 0's is Model::length())
  gpu::Ops ops_;  // the device's pipelines and everything decided about them
  vk::RecorderStats stats_;

  Packer weights_;
  std::map<std::string, gpu::Weight> tensors_;
  ModelWeights<const gpu::Weight*> w_;

  Packer state_;  // activations and the KV cache
  size_t x_, h_, qkv_, att_, fc_;
  std::optional<size_t> gate_;  // a gated MLP's [n_ctx, 2F]
  // [layer]: [slots, slot rows, A], slot_stride_ apart; an encoder's layers share one [R, A].
  std::vector<size_t> k_cache_, v_cache_;
  // [layer]: [sources, n_ctx, A] fp32 (cross-attention), source_stride_ apart.
  std::vector<size_t> source_k_, source_v_;
  uint64_t source_bytes_ = 0, source_stride_ = 0;
  std::vector<uint32_t> source_lens_;  // [sources]: rows held (0: none)
  std::vector<uint32_t> source_of_;    // [slots]: the source cache a slot reads, or kNoSource
  uint64_t slot_bytes_ = 0, slot_stride_ = 0;
  // Batches run attention_store_batch (the same dispatches for any number of rows) where it
  // can, else each row's own.
  bool batch_attention_ = false;
  Packer io_;      // host-visible: the best candidates out
  Packer params_;  // host-written before each pass: the ids and the position
  size_t ids_, step_, top_ids_, top_values_, scratch_;
  std::optional<size_t> types_;  // an encoder's token types
  size_t batch_rows_ = 0;        // a batch's {pos, cache texel} per row (attention_store_batch)
  // Partial results of split-K attention (decoding) and of the tiled kernel's key ranges, where
  // they may run; and the split kernel's counts of finished key blocks (its merge fused), zero
  // between dispatches.
  std::optional<size_t> split_, split_counts_;
  size_t partials_;  // greedy decoding: the head's argmax partials (gpu::matmul_argmax)

  std::unique_ptr<vk::Arena> logits_arena_;  // [rows, V], grown when more rows are asked for
  vk::BufferSpan logits_;
  uint32_t logit_rows_ = 0;
  std::unique_ptr<vk::Arena> taps_arena_;
  std::vector<vk::BufferSpan> tap_spans_;  // [layer][n_ctx, C]
  // The attention tap of this pass: [layer][H, T, L] for the tapped layers, else empty spans.
  std::vector<std::unique_ptr<vk::Arena>> probs_arenas_, cross_probs_arenas_;
  std::vector<vk::BufferSpan> probs_spans_, cross_probs_spans_;
  // Last: destroyed first, so a pending submission settles before the memory it uses is freed.
  vk::Recorder rec_;
};

}  // namespace model
