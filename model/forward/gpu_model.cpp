// The GPU forward pass: model/graph.h recorded through the gpu:: ops into one command buffer.
#include "model/forward/gpu_model.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "model/formats/checkpoint.h"
#include "model/ops/gpu/activation.h"
#include "model/ops/gpu/attention.h"
#include "model/ops/gpu/common.h"
#include "model/ops/gpu/embedding.h"
#include "model/ops/gpu/layernorm.h"
#include "model/ops/gpu/matmul.h"
#include "model/ops/gpu/topk.h"
#include "model/forward/graph.h"
#include "model/forward/packer.h"
#include "vk/check.h"

namespace model {
namespace {

// The device's kernel policy, after the one-time self-test of its matrix units where the policy
// would use them: on a mismatch the note becomes a warning and prompts take the scalar tiles.
gpu::KernelPolicy checked_policy(const vk::Device& device, std::vector<std::string>& warnings) {
  const std::string note = gpu::check_coop_matrix(device.kernels());
  if (!note.empty()) warnings.push_back(note);
  return gpu::kernel_policy(device);
}

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
  SubmissionRates rates() const { return rates_.value_or(SubmissionRates{}); }
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
  std::optional<size_t> split_;  // split-K attention's partial results, where it may run
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

// A matrix's K (inputs) and N (outputs), given the layout the checkpoint stores it in.
uint32_t matrix_k(const ExpectedTensor& e, WeightLayout from) {
  return static_cast<uint32_t>(from == WeightLayout::NK ? e.shape[1] : e.shape[0]);
}
uint32_t matrix_n(const ExpectedTensor& e, WeightLayout from) {
  return static_cast<uint32_t>(from == WeightLayout::NK ? e.shape[0] : e.shape[1]);
}

// The layout a matrix is stored in: where the kernel policy interleaves, every matrix the matmul
// reads, the tied wte included (embedding reads it there); where it asks for [N, K], every
// matrix the matmul reads as [N, K]; otherwise as the checkpoint has it. Returns KN, NK or
// Interleaved; `from` gets the checkpoint's own layout.
WeightLayout GpuModel::matrix_layout(const ExpectedTensor& e, DType dtype,
                                          WeightLayout& from) const {
  const bool rows_out = e.name == "wte.weight" || e.name == "lm_head.weight";
  from = rows_out ? WeightLayout::NK : WeightLayout::KN;
  const bool matmul_reads = e.name != "wpe.weight" &&
                            (e.name != "wte.weight" || config_.tie_word_embeddings);
  const vk::DeviceCaps& caps = device_.caps();
  const uint32_t K = matrix_k(e, from);
  const bool fast = policy_.interleaved_weights &&
                    gpu::matmul_interleaved_supported(caps, dtype, K) &&
                    caps.texel_buffer_alignment <= weights_.alignment() &&
                    caps.texel_buffer_alignment <= state_.alignment();
  if (matmul_reads && fast) return WeightLayout::Interleaved;
  return matmul_reads && policy_.nk_weights ? WeightLayout::NK : from;
}

void GpuModel::upload_weights(const Checkpoint& ckpt, const UploadProgress& on_upload) {
  const std::vector<ExpectedTensor> expected = expected_tensors(config_);
  struct Plan {
    size_t handle;
    DType dtype;
    WeightLayout layout, from;
  };
  std::vector<Plan> plans;
  uint64_t total = 0;
  for (const ExpectedTensor& e : expected) {
    // Matrices take the chosen precision; LayerNorm parameters and biases stay fp32.
    const bool matrix = e.shape.size() == 2;
    Plan p{0, matrix && precision_ == Precision::F16 ? DType::F16 : DType::F32,
           WeightLayout::KN, WeightLayout::KN};
    if (matrix) p.layout = matrix_layout(e, p.dtype, p.from);
    const uint64_t n = ckpt.tensor(e.name).elements();
    const uint64_t bytes = p.layout == WeightLayout::Interleaved
                               ? gpu::interleaved_bytes(p.dtype, matrix_k(e, p.from), matrix_n(e, p.from))
                               : vk::align_up(n * dtype_bytes(p.dtype), 4);  // whole fp16 pairs
    p.handle = weights_.add(bytes);
    plans.push_back(p);
    total += bytes;
  }
  weights_.allocate(vk::MemoryKind::Device);

  uint64_t done = 0;
  std::vector<uint8_t> host, plain;
  for (size_t i = 0; i < expected.size(); i++) {
    const ExpectedTensor& e = expected[i];
    const TensorView& src = ckpt.tensor(e.name);
    const vk::BufferSpan& dst = weights_.span(plans[i].handle);
    const uint64_t n = src.elements();
    const bool interleaved = plans[i].layout == WeightLayout::Interleaved;
    const bool transposed =
        plans[i].layout == WeightLayout::NK && plans[i].from == WeightLayout::KN;
    // Convert straight into mapped memory where the device has it (UMA), else via a host copy;
    // an interleaved or transposed matrix is converted first, then repacked.
    uint8_t* out = dst.mapped;
    if (!out) {
      host.assign(dst.size, 0);
      out = host.data();
    }
    uint8_t* converted = out;
    if (interleaved || transposed) {
      plain.resize(n * dtype_bytes(plans[i].dtype));
      converted = plain.data();
    }
    const bool f16 = plans[i].dtype == DType::F16;
    const uint64_t bad = f16 ? to_f16(src, reinterpret_cast<uint16_t*>(converted), 0, n)
                             : to_f32(src, reinterpret_cast<float*>(converted), 0, n);
    warn_nonfinite(ckpt, e.name, bad, n, f16 && src.dtype != TensorDType::F16 ? "f16" : nullptr);
    if (interleaved)
      gpu::interleave(out, converted, plans[i].from, plans[i].dtype, matrix_k(e, plans[i].from),
                      matrix_n(e, plans[i].from));
    if (transposed)
      gpu::transpose_kn(out, converted, plans[i].dtype, matrix_k(e, plans[i].from),
                        matrix_n(e, plans[i].from));
    if (!dst.mapped) vk::upload(device_, dst, host.data(), dst.size);
    done += dst.size;
    if (on_upload) on_upload(done, total);
    tensors_[e.name] = gpu::Weight{dst, plans[i].dtype, plans[i].layout};
  }
  w_ = map_weights<const gpu::Weight*>(config_, [&](const std::string& name) -> const gpu::Weight* {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  });
}

void GpuModel::plan_state() {
  const Config& c = config_;
  const uint64_t T = c.n_ctx, C = c.n_embd, f = 4;
  x_ = state_.add(T * C * f);
  h_ = state_.add(T * C * f);
  att_ = state_.add(T * C * f);
  qkv_ = state_.add(T * 3 * C * f);
  fc_ = state_.add(T * c.n_inner * f);
  // A layer's slots side by side, each on a binding's alignment (slot_prefill binds one alone)
  // and all bound at once by a batch.
  slot_bytes_ = (slots_ == 1 ? T : slot_ctx_) * C * dtype_bytes(kv_cache_);
  slot_stride_ = vk::align_up(slot_bytes_, std::max(state_.alignment(),
                                                     gpu::texel_binding_alignment(device_.caps())));
  const uint64_t layer_bytes = slot_stride_ * (slots_ - 1) + slot_bytes_;
  for (uint32_t i = 0; i < c.n_layer; i++) {
    k_cache_.push_back(state_.add(layer_bytes));
    v_cache_.push_back(state_.add(layer_bytes));
  }
  slot_len_.assign(slots_, 0);
  // The split kernel's scratch: where the policy decodes with it, and for a batch over fp16
  // caches, which only the split kernel reads at once (gpu::attention_store_batch).
  if (policy_.split_attention || (slots_ > 1 && kv_cache_ == DType::F16))
    split_ = state_.add(gpu::attention_split_scratch_bytes(gpu::kAttentionSplitMaxT, c.n_ctx,
                                                           c.n_embd, c.n_head));
  // The top-k's rounds re-read their scratch: device memory, not host memory over the bus.
  const uint32_t k = std::min(Model::kMaxCandidates, c.n_vocab);
  scratch_ = state_.add(std::max<uint64_t>(4, gpu::topk_scratch_bytes(device_, c.n_vocab, k)));
  state_.allocate(vk::MemoryKind::Device);

  // What the host writes (ids) and reads back (the candidates, the argmax partials) each pass:
  // host-cached memory where the device offers it, since the host reads most of it.
  top_ids_ = io_.add(k * 4);
  top_values_ = io_.add(k * 4);
  partials_ = io_.add(uint64_t{2} * gpu::matmul_argmax_partials(c.n_vocab) * 4);
  io_.allocate(vk::MemoryKind::Readback);
  // What the host writes before each pass and its dispatches read: the ids, and the position
  // (gpu::step_binding), which every attention dispatch reads; in device-local memory where the
  // device lets the host write there.
  ids_ = params_.add(std::max<uint64_t>(T, slots_) * 4);  // a prompt's, or a batch's one per row
  step_ = params_.add(4);
  batch_rows_ = params_.add(uint64_t{2} * 4 * slots_);
  params_.allocate(vk::MemoryKind::Parameters);
  if (slots_ > 1) {
    gpu::AttentionOptions o;
    o.cache = kv_cache_;
    if (split_) o.scratch = &state_.span(*split_);
    batch_attention_ =
        gpu::attention_store_batch_unsupported(device_, state_.span(k_cache_[0]),
                                               state_.span(v_cache_[0]), state_.span(qkv_),
                                               slots_, slot_ctx_, c.n_embd, c.n_head, o)
            .empty();
  }
  ensure_logits(1);
}

// The logits buffer holds the most rows asked for so far: one for generation, T for logits().
void GpuModel::ensure_logits(uint32_t rows) {
  if (rows <= logit_rows_) return;
  const uint64_t bytes = uint64_t(rows) * config_.n_vocab * 4;
  logits_arena_.reset();
  logits_arena_ = std::make_unique<vk::Arena>(device_, bytes, vk::MemoryKind::Device, "logits");
  logits_ = logits_arena_->alloc(bytes);
  logit_rows_ = rows;
}

void GpuModel::ensure_taps() {
  if (taps_arena_) return;
  const Config& c = config_;
  const uint64_t align = std::max<uint64_t>(16, device_.caps().storage_buffer_alignment);
  const uint64_t each = vk::align_up(uint64_t(c.n_ctx) * c.n_embd * 4, align);
  taps_arena_ = std::make_unique<vk::Arena>(device_, each * c.n_layer, vk::MemoryKind::Device, "taps");
  for (uint32_t i = 0; i < c.n_layer; i++) tap_spans_.push_back(taps_arena_->alloc(each));
}

// One arena per tapped layer, each [H, T, L] of this pass (each must fit one binding).
void GpuModel::ensure_attention_taps(uint32_t T, uint32_t L) {
  const Config& c = config_;
  const uint64_t bytes = uint64_t{c.n_head} * T * L * sizeof(float);
  probs_spans_.assign(c.n_layer, {});
  probs_arenas_.resize(c.n_layer);
  for (uint32_t i = 0; i < c.n_layer; i++) {
    if (!attention_tapped(i)) continue;
    if (!probs_arenas_[i] || probs_arenas_[i]->capacity() < bytes) {
      probs_arenas_[i].reset();
      probs_arenas_[i] = std::make_unique<vk::Arena>(device_, bytes, vk::MemoryKind::Device,
                                                     "attention probabilities");
    }
    probs_arenas_[i]->reset();
    probs_spans_[i] = probs_arenas_[i]->alloc(bytes);
  }
}

Head GpuModel::record_pass(uint32_t T, uint32_t pos, bool all_rows, uint32_t k, bool dry,
                          bool last) {
  const Config& c = config_;
  const uint32_t V = c.n_vocab;
  // Greedy decoding on an interleaved head finds the best logit in the head's own pass.
  const bool argmax = !all_rows && k == 1 &&
                      w_.head.w->layout == WeightLayout::Interleaved && V <= (1u << 24);
  const Head head = all_rows ? Head::AllRows
                    : !last   ? Head::None
                    : argmax  ? Head::LastArgmax
                              : Head::LastRow;
  // Blocks per submission: as asked, or by the pass's estimated cost.
  const DType wdtype = weight_dtype();
  const SubmissionRates rates = this->rates();
  pass_split_ = split_layers_ ? split_layers_
                : automatic() ? blocks_per_submission(c, T, pos + T, wdtype, rates)
                              : 0;
  // The head goes with the last submission's blocks, or where together they would be over
  // budget, in a submission of its own.
  const uint32_t blocks = pass_split_ ? pass_split_ : c.n_layer;
  const uint32_t tail = c.n_layer % blocks ? c.n_layer % blocks : blocks;
  const double each = block_seconds(c, T, pos + T, wdtype, rates);
  const double head_s = head == Head::None ? 0 : head_seconds(c, all_rows ? T : 1, wdtype, rates);
  head_apart_ = automatic() && head_s > 0 && tail * each + head_s > rates.budget_s;
  // The longest submission's expected time sets how long a wait for it may take.
  if (!device_.fence_timeout_set()) {
    const double expected =
        head_apart_ ? std::max(blocks * each, head_s) : blocks * each + head_s;
    rec_.set_timeout(model::submission_timeout(expected, device_.fence_timeout_s()));
  }
  if (dry)
    rec_.begin_dry();
  else
    rec_.begin();
  GpuBackend b{*this};
  forward(b, c, w_, T, pos, head);
  if (head == Head::LastRow && k > 0)
    gpu::topk(kernels_, rec_, io_.span(top_ids_), io_.span(top_values_), logits_,
              state_.span(scratch_), V, k);
  rec_.end();
  return head;
}

size_t GpuModel::prepare(uint32_t prompt_tokens, uint32_t max_new, uint32_t k,
                         const vk::CompileProgress& progress) {
  const Config& c = config_;
  const uint32_t n = c.n_ctx, P = std::clamp<uint32_t>(prompt_tokens, 1, n);
  // The passes generate() will run (model/generation/generate.cpp), as (T, pos): the prompt's,
  // and for a causal model one-token passes from pos P on, up to the last position reached
  // (kernel choices change with the cache length only one way, so the first and the last
  // decode cover those between); a full context slides to its last n/2 tokens, recomputed,
  // then decodes from there. A bidirectional model has no cache: every step is the whole
  // sequence again, so one pass per length. Each is recorded in the chunks run() cuts it into.
  std::vector<std::pair<uint32_t, uint32_t>> passes{{P, 0}};
  const uint64_t last = uint64_t{P} + max_new - 1;  // tokens seen before the last pass's output
  if (max_new > 1 && !c.causal) {
    for (uint64_t t = P + 1; t <= std::min<uint64_t>(last, n); t++)
      passes.emplace_back(static_cast<uint32_t>(t), 0);
  } else if (max_new > 1) {
    if (P < n) passes.emplace_back(1, P);
    if (last > n) {
      const uint32_t keep = std::max<uint32_t>(1, n / 2);
      passes.emplace_back(keep, 0);
      if (keep < n) passes.emplace_back(1, keep);
    }
    const auto end = static_cast<uint32_t>(std::min<uint64_t>(last, n) - 1);
    if (end > P) passes.emplace_back(1, end);
  }
  probs_spans_.clear();  // next() records no attention tap for these passes
  kernels_.defer(true);
  try {
    for (auto [T, pos] : passes) {
      const std::vector<uint32_t> parts = chunks(T, pos, false);
      uint32_t done = 0;
      for (size_t i = 0; i < parts.size(); done += parts[i++])
        record_pass(parts[i], pos + done, false, k, true, i + 1 == parts.size());
    }
    // With slots, the batches of slot_decode too: every row count (the matmul tiles change
    // with it), the rows at the first and at the last position a slot reaches.
    std::vector<SlotToken> rows;
    if (slots_ > 1) ensure_logits(slots_);
    for (uint32_t b = 0; b < (slots_ > 1 ? slots_ : 0); b++) {
      rows.push_back({b, 0});
      for (uint32_t at : {0u, slot_ctx_ - 1}) {
        const Batch batch{rows, std::vector<uint32_t>(rows.size(), at)};
        const SlotPass pass(*this, 0, &batch);
        record_pass(b + 1, at, true, 0, true);
      }
    }
  } catch (...) {
    kernels_.defer(false);
    throw;
  }
  kernels_.defer(false);
  return kernels_.compile_deferred(progress);
}

// One pass, or a long prompt's chunks one after another (each fills the cache the next
// attends to); the outputs are gathered as one pass would give them.
void GpuModel::run_at(uint32_t pos, std::span<const int32_t> ids, bool all_rows, uint32_t k,
                      std::vector<float>& logits, std::vector<int32_t>& top_ids) {
  const Config& c = config_;
  const auto T = static_cast<uint32_t>(ids.size());
  const uint32_t L = pos + T, V = c.n_vocab, C = c.n_embd, H = c.n_head;
  const bool taps = taps_on_ && all_rows, attention = attention_on_ && all_rows;
  if (all_rows) logits.resize(size_t(T) * V);
  if (taps) taps_.assign(c.n_layer, std::vector<float>(size_t(T) * C));
  if (attention) {
    attention_.assign(c.n_layer, {});
    for (uint32_t i = 0; i < c.n_layer; i++)
      if (attention_tapped(i)) attention_[i].assign(size_t(H) * T * L, 0.0f);
  }
  const std::vector<uint32_t> parts = chunks(T, pos, all_rows);
  vk::RecorderStats sum;
  std::vector<float> probs;
  uint32_t done = 0;
  for (size_t part = 0; part < parts.size(); done += parts[part++]) {
    const uint32_t t = parts[part], at = pos + done, Lt = at + t;
    const bool last = part + 1 == parts.size();
    const Head head = run_pass(ids.subspan(done, t), at, all_rows, k, last);
    sum += rec_.stats();
    if (head == Head::LastArgmax) {
      const auto [id, value] =
          gpu::argmax_of_partials(reinterpret_cast<const float*>(io_.span(partials_).mapped),
                                  gpu::matmul_argmax_partials(V));
      if (id < 0)
        throw vk::Error("every logit is NaN: the model's weights or activations are broken");
      top_ids.assign(1, id);
      logits.assign(1, value);
    } else if (head == Head::LastRow && k > 0) {
      top_ids.resize(k);
      logits.resize(k);
      std::memcpy(top_ids.data(), io_.span(top_ids_).mapped, k * 4);
      std::memcpy(logits.data(), io_.span(top_values_).mapped, k * 4);
    } else if (head == Head::LastRow) {
      logits.resize(V);
      vk::download(device_, logits.data(), logits_, size_t(V) * 4);
    } else if (head == Head::AllRows) {
      vk::download(device_, logits.data() + size_t(done) * V, logits_, size_t(t) * V * 4);
    }
    if (taps)
      for (uint32_t i = 0; i < c.n_layer; i++)
        vk::download(device_, taps_[i].data() + size_t(done) * C, tap_spans_[i],
                     size_t(t) * C * 4);
    // This chunk's [H, t, Lt] into rows done.. of [H, T, L]; keys past Lt stay 0 (a causal
    // query does not see them; only a causal pass is cut).
    for (uint32_t i = 0; attention && i < c.n_layer; i++) {
      if (attention_[i].empty()) continue;
      probs.resize(size_t(H) * t * Lt);
      vk::download(device_, probs.data(), probs_spans_[i], probs.size() * 4);
      for (uint32_t h = 0; h < H; h++)
        for (uint32_t r = 0; r < t; r++)
          std::memcpy(attention_[i].data() + (size_t(h) * T + done + r) * L,
                      probs.data() + (size_t(h) * t + r) * Lt, size_t(Lt) * 4);
    }
  }
  stats_ = sum;
}

Head GpuModel::run_pass(std::span<const int32_t> ids, uint32_t pos, bool all_rows, uint32_t k,
                        bool last) {
  const auto T = static_cast<uint32_t>(ids.size());
  ensure_logits(all_rows ? T : 1);
  if (taps_on_ && all_rows) ensure_taps();
  if (attention_on_ && all_rows)
    ensure_attention_taps(T, pos + T);
  else
    probs_spans_.clear();
  rec_.wait();  // a submission still running (after a timed-out wait) may read what follows
  std::memcpy(params_.span(ids_).mapped, ids.data(), ids.size_bytes());
  std::memcpy(params_.span(step_).mapped, &pos, sizeof pos);

  // A decode step: a dry recording says whether the last recording would be recorded again;
  // then it is submitted as it is (no descriptor writes, no commands), else recorded anew.
  const Head head = submit_pass(T == 1 && !all_rows, T, pos, all_rows, k, last);
  rec_.wait();
  return head;
}

Head GpuModel::submit_pass(bool replayable, uint32_t T, uint32_t pos, bool all_rows, uint32_t k,
                           bool last) {
  if (replay_ && replayable) {
    const Head head = record_pass(T, pos, all_rows, k, true, last);
    if (rec_.dry_matches()) {
      rec_.replay();
      return head;
    }
  }
  const Head head = record_pass(T, pos, all_rows, k, false, last);
  rec_.submit();
  return head;
}

void GpuModel::check_slots() const {
  const Config& c = config_;
  if (slots_ < 1 || slots_ > kMaxSlots)
    throw std::runtime_error(std::to_string(slots_) + " slots: a model decodes 1 to " +
                             std::to_string(kMaxSlots) + " sequences together");
  if (slot_ctx_ < 1 || slot_ctx_ > c.n_ctx)
    throw std::runtime_error("a slot of " + std::to_string(slot_ctx_) +
                             " tokens: the model's context is " + std::to_string(c.n_ctx));
  if (slots_ > 1 && !c.causal)
    throw std::runtime_error("a bidirectional model has no cache to decode several sequences from");
  // A batch's rows are views of the activations at row offsets, which must be aligned.
  const uint64_t align = std::max(device_.caps().storage_buffer_alignment,
                                  device_.caps().texel_buffer_alignment);
  if (slots_ > 1 && (uint64_t{c.n_embd} * 4) % align != 0)
    throw std::runtime_error("decoding several sequences together needs a row of " +
                             std::to_string(c.n_embd) + " floats to be a multiple of " +
                             std::to_string(align) + " bytes, this device's offset alignment");
}

uint32_t GpuModel::slot_length(uint32_t slot) const {
  if (slots_ == 1) return Model::slot_length(slot);
  check_slot(slot);
  return slot_len_[slot];
}

void GpuModel::slot_reset(uint32_t slot) {
  if (slots_ == 1) return Model::slot_reset(slot);
  check_slot(slot);
  slot_len_[slot] = 0;
}

std::vector<float> GpuModel::slot_prefill(uint32_t slot, std::span<const int32_t> ids,
                                          bool all_rows) {
  if (slots_ == 1) return Model::slot_prefill(slot, ids, all_rows);
  check_slot(slot);
  check(ids, slot_len_[slot], slot_ctx_, "the slot's");
  std::vector<float> logits;
  std::vector<int32_t> unused;
  probs_spans_.clear();
  {
    const SlotPass pass(*this, slot, nullptr);
    run_at(slot_len_[slot], ids, all_rows, 0, logits, unused);
  }
  slot_len_[slot] += static_cast<uint32_t>(ids.size());
  return logits;
}

std::vector<float> GpuModel::slot_decode(std::span<const SlotToken> rows) {
  if (slots_ == 1) return Model::slot_decode(rows);
  const Config& c = config_;
  const auto B = static_cast<uint32_t>(rows.size());
  if (B == 0 || B > slots_)
    throw std::runtime_error("a batch of " + std::to_string(B) + " rows for " +
                             std::to_string(slots_) + " slots");
  Batch batch{rows, {}};
  std::vector<bool> seen(slots_);
  uint32_t last = 0;
  for (const SlotToken& r : rows) {
    check_slot(r.slot);
    if (seen[r.slot]) throw std::runtime_error("slot " + std::to_string(r.slot) + " twice in a batch");
    seen[r.slot] = true;
    check(std::span(&r.id, 1), slot_len_[r.slot], slot_ctx_,
          "slot " + std::to_string(r.slot) + "'s");
    batch.pos.push_back(slot_len_[r.slot]);
    last = std::max(last, slot_len_[r.slot]);
  }
  rec_.wait();  // a submission still running (after a timed-out wait) may read what follows
  ensure_logits(B);
  probs_spans_.clear();
  for (uint32_t b = 0; b < B; b++) {
    std::memcpy(params_.span(ids_).mapped + b * 4, &rows[b].id, 4);
    const uint32_t at[2] = {batch.pos[b], static_cast<uint32_t>(rows[b].slot * slot_stride_ / 16)};
    std::memcpy(params_.span(batch_rows_).mapped + b * 8, at, 8);
  }
  {
    // Every dispatch reads the rows' ids and positions from the buffers just written, so the
    // steps of a batch of the same size record the same commands (not where the longest row
    // crosses a 64-key block of the split attention, a prompt chunk ran in between, or the pass
    // is cut into submissions): a dry recording says so, and the last real one is submitted
    // again, as for a single sequence's decode steps (run_pass).
    const SlotPass pass(*this, 0, &batch);
    submit_pass(true, B, last, true, 0);
    rec_.wait();
  }
  stats_ = rec_.stats();
  std::vector<float> logits(size_t(B) * c.n_vocab);
  vk::download(device_, logits.data(), logits_, logits.size() * 4);
  for (const SlotToken& r : rows) slot_len_[r.slot]++;
  return logits;
}

const vk::BufferSpan& GpuBackend::buf(Buf b) const {
  switch (b) {
    case Buf::X: return m.state_.span(m.x_);
    case Buf::H: return m.state_.span(m.h_);
    case Buf::QKV: return m.state_.span(m.qkv_);
    case Buf::ATT: return m.state_.span(m.att_);
    case Buf::FC: return m.state_.span(m.fc_);
    case Buf::LOGITS: break;
  }
  return m.logits_;
}

void GpuBackend::embed(uint32_t T, uint32_t pos) {
  const Config& c = m.config_;
  const gpu::Weight& wte = *m.w_.wte;
  if (m.batch_) {  // row b at its slot's next position, read from the batch table
    gpu::embedding_batch(m.kernels_, m.rec_, buf(Buf::X), m.params_.span(m.ids_), wte, m.w_.wpe,
                         T, c.n_embd, c.n_vocab, c.n_ctx, c.positions,
                         wte.layout == WeightLayout::Interleaved, m.params_.span(m.batch_rows_));
    return;
  }
  gpu::embedding(m.kernels_, m.rec_, buf(Buf::X), m.params_.span(m.ids_), wte, m.w_.wpe, T,
                 c.n_embd, c.n_vocab, c.n_ctx, pos, c.positions,
                 wte.layout == WeightLayout::Interleaved, &m.params_.span(m.step_));
}

void GpuBackend::layernorm(Buf out, Buf in, const GpuNorm& n, uint32_t T) {
  const Config& c = m.config_;
  gpu::layernorm(m.kernels_, m.rec_, buf(out), buf(in), n.gamma->span, n.beta->span, T, c.n_embd,
                 c.layer_norm_epsilon, c.layer_norm);
}

void GpuBackend::linear(Buf out, Buf in, const GpuLinear& l, uint32_t T, const Epilogue& e,
                        uint32_t in_row, gpu::MatmulKernel kernel,
                        const gpu::MatmulNorm* norm) {
  gpu::matmul(m.kernels_, m.rec_, buf(out), buf(in), *l.w, l.b ? &l.b->span : nullptr,
              e.residual ? &buf(*e.residual) : nullptr, T, l.K, l.N,
              {l.w->layout, e.act, kernel, in_row, norm});
}

// Fused where the policy says the dispatch it saves costs more than the reads it adds
// (norm_linear_max_bytes): matmul_interleaved (the CPU set's interleaved weights, rows from the
// first only) or matmul_vec_wide (the GPU set's [N, K] weights, at most kMatmulVecRows rows:
// decode steps, batches, short prompts, the head's last row) normalises each row of x as it
// reads it, and H is never written. Otherwise the LayerNorm into H, then the matmul.
void GpuBackend::norm_linear(Buf out, Buf in, const GpuNorm& n, const GpuLinear& l, uint32_t T,
                             const Epilogue& e, uint32_t in_row) {
  const uint64_t w_bytes = uint64_t{l.K} * l.N * dtype_bytes(l.w->dtype);
  const bool interleaved = l.w->layout == WeightLayout::Interleaved && in_row == 0;
  const bool wide = m.policy_.nk_weights && l.w->layout == WeightLayout::NK &&
                    T <= gpu::kMatmulVecRows &&
                    gpu::matmul_wide_supported(l.w->dtype, l.w->layout, l.K, buf(in).offset,
                                               l.w->span.offset);
  if ((interleaved || wide) && w_bytes <= m.policy_.norm_linear_max_bytes) {
    const Config& c = m.config_;
    const gpu::MatmulNorm norm{n.gamma->span, n.beta->span, c.layer_norm, c.layer_norm_epsilon};
    linear(out, in, l, T, e, in_row,
           wide ? gpu::MatmulKernel::VectorWide : gpu::MatmulKernel::Auto, &norm);
    return;
  }
  layernorm(Buf::H, in, n, in_row + T);
  linear(out, Buf::H, l, T, e, in_row);
}

void GpuBackend::argmax_head(Buf in, const GpuLinear& l, uint32_t row) {
  gpu::matmul_argmax(m.kernels_, m.rec_, m.io_.span(m.partials_), buf(in), *l.w, l.K, l.N, row);
}

void GpuBackend::attention_store(uint32_t layer, uint32_t T, uint32_t pos) {
  const Config& c = m.config_;
  gpu::AttentionOptions o;
  o.causal = c.causal;
  o.scale = c.attention_scale;
  o.cache = m.kv_cache_;
  if (m.split_) o.scratch = &m.state_.span(*m.split_);
  if (m.batch_ && m.batch_attention_) {  // every row at once, each as its decode step alone
    const uint32_t longest = *std::max_element(m.batch_->pos.begin(), m.batch_->pos.end()) + 1;
    gpu::attention_store_batch(m.kernels_, m.rec_, buf(Buf::ATT), m.state_.span(m.k_cache_[layer]),
                               m.state_.span(m.v_cache_[layer]), buf(Buf::QKV),
                               m.params_.span(m.batch_rows_), T, longest, c.n_embd, c.n_head, o);
    return;
  }
  if (m.batch_) {  // each row alone, in its slot's cache: the same work as a decode step alone
    const uint64_t row = uint64_t{c.n_embd} * 4;
    for (uint32_t b = 0; b < T; b++) {
      const uint32_t slot = m.batch_->rows[b].slot;
      gpu::attention_store(m.kernels_, m.rec_, buf(Buf::ATT).sub(b * row, row),
                           m.k_cache(layer, slot), m.v_cache(layer, slot),
                           buf(Buf::QKV).sub(b * 3 * row, 3 * row), 1, m.batch_->pos[b],
                           c.n_embd, c.n_head, o);
    }
    return;
  }
  const vk::BufferSpan kc = m.k_cache(layer, m.active_slot_);
  const vk::BufferSpan vc = m.v_cache(layer, m.active_slot_);
  if (layer < m.probs_spans_.size() && m.probs_spans_[layer].size > 0)
    o.probs = &m.probs_spans_[layer];
  o.step = &m.params_.span(m.step_);  // holds pos (GpuModel::run)
  gpu::attention_store(m.kernels_, m.rec_, buf(Buf::ATT), kc, vc, buf(Buf::QKV), T, pos, c.n_embd,
                       c.n_head, o);
}

void GpuBackend::tap(uint32_t layer, uint32_t T) {
  if (m.taps_on_ && m.taps_arena_)
    gpu::activation(m.kernels_, m.rec_, m.tap_spans_[layer], buf(Buf::X), T * m.config_.n_embd,
                    Activation::None);
  // The end of a block: with split_layers, the end of a submission too (after the last block
  // only where the head runs apart).
  const uint32_t n = m.pass_split_;
  if (layer + 1 == m.config_.n_layer ? m.head_apart_ : n && (layer + 1) % n == 0) m.rec_.flush();
}

}  // namespace

std::unique_ptr<Model> make_gpu_model(const Checkpoint& checkpoint, const vk::Device& device,
                                      const GpuModelOptions& options) {
  return std::make_unique<GpuModel>(checkpoint, device, options);
}

double gpu_submission_timeout(const Model& model) {
  return dynamic_cast<const GpuModel&>(model).wait_timeout();
}

const vk::RecorderStats& gpu_stats(const Model& model) {
  return dynamic_cast<const GpuModel&>(model).stats();
}

std::vector<vk::DispatchTime> gpu_timings(const Model& model) {
  return dynamic_cast<const GpuModel&>(model).timings();
}

std::string gpu_kernels(const Model& model) {
  return dynamic_cast<const GpuModel&>(model).policy().describe();
}

}  // namespace model
