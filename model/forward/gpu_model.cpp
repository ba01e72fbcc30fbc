// The GPU forward pass: model/graph.h recorded through the gpu:: ops into one command buffer.
// This file: the model's weights, state, passes and slots; gpu_backend.cpp: the ops each step
// of the graph records.
#include "model/forward/gpu_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model_impl.h"
#include "model/ops/gpu/attention.h"
#include "model/ops/gpu/choose.h"
#include "model/ops/gpu/common.h"
#include "model/ops/gpu/embedding.h"
#include "model/ops/gpu/interleave.h"
#include "model/ops/gpu/matmul.h"
#include "model/ops/gpu/matmul_argmax.h"
#include "model/ops/gpu/topk.h"
#include "vk/check.h"

namespace model {
namespace {

// A matrix's K (inputs) and N (outputs), given the layout the checkpoint stores it in.
uint32_t matrix_k(const ExpectedTensor& e, WeightLayout from) {
  return static_cast<uint32_t>(from == WeightLayout::NK ? e.shape[1] : e.shape[0]);
}
uint32_t matrix_n(const ExpectedTensor& e, WeightLayout from) {
  return static_cast<uint32_t>(from == WeightLayout::NK ? e.shape[0] : e.shape[1]);
}

}  // namespace

// The layout a matrix is stored in (choose.h's weight_layout): KN, NK or Interleaved; `from`
// gets the checkpoint's own layout.
WeightLayout GpuModel::matrix_layout(const ExpectedTensor& e, DType dtype,
                                          WeightLayout& from) const {
  const bool rows_out = e.name == "wte.weight" || e.name == "lm_head.weight";
  from = rows_out ? WeightLayout::NK : WeightLayout::KN;
  const bool matmul_reads = e.name != "wpe.weight" && e.name != "wtt.weight" &&
                            (e.name != "wte.weight" || config_.tie_word_embeddings);
  const vk::DeviceCaps& caps = device_.caps();
  const uint32_t K = matrix_k(e, from);
  const bool interleaved_fits = gpu::matmul_interleaved_supported(caps, dtype, K) &&
                                caps.texel_buffer_alignment <= weights_.alignment() &&
                                caps.texel_buffer_alignment <= state_.alignment();
  return gpu::weight_layout(ops_.policy(), from, matmul_reads, interleaved_fits);
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
    // Matrices take the chosen precision; LayerNorm parameters, biases and the relative
    // position bias stay fp32.
    const bool matrix = e.matrix();
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
  // The residual stream and norms are the model's width C, attention and its caches A.
  const uint64_t C = c.n_embd, A = c.attn_width(), f = 4, kv = dtype_bytes(kv_cache_);
  const bool encoder = c.family == Family::Encoder;
  // An encoder's batch: the sequences asked for, as far as one binding holds their widest rows.
  rows_ = c.n_ctx;
  if (encoder && encoder_batch_ > 1) {
    const uint64_t widest = f * std::max({C, 3 * A, uint64_t{c.n_inner} * (c.gated_mlp ? 2 : 1)});
    const uint64_t fit = device_.caps().max_storage_buffer_range / widest;
    rows_ = static_cast<uint32_t>(
        std::max<uint64_t>(c.n_ctx, std::min<uint64_t>(uint64_t{encoder_batch_} * c.n_ctx, fit)));
  }
  // The rows a batch's sequence starts at a multiple of: its views (ATT, QKV, the cache) on the
  // binding alignment, a power of two.
  const uint64_t align = std::max(device_.caps().storage_buffer_alignment,
                                  gpu::texel_binding_alignment(device_.caps()));
  for (const uint64_t row : {A * f, 3 * A * f, A * kv})
    segment_rows_ = std::max(segment_rows_, static_cast<uint32_t>(align / std::gcd(row, align)));
  const uint64_t T = rows_;
  x_ = state_.add(T * C * f);
  h_ = state_.add(T * C * f);
  att_ = state_.add(T * A * f);
  qkv_ = state_.add(T * 3 * A * f);
  fc_ = state_.add(T * c.n_inner * f);
  if (c.gated_mlp) gate_ = state_.add(T * 2 * c.n_inner * f);
  // A layer's slots side by side, each on a binding's alignment (slot_prefill binds one alone)
  // and all bound at once by a batch.
  slot_bytes_ = (slots_ == 1 ? T : slot_ctx_) * A * dtype_bytes(kv_cache_);
  slot_stride_ = vk::align_up(slot_bytes_, std::max(state_.alignment(),
                                                     gpu::texel_binding_alignment(device_.caps())));
  const uint64_t layer_bytes = slot_stride_ * (slots_ - 1) + slot_bytes_;
  for (uint32_t i = 0; i < c.n_layer; i++) {
    const bool shared = encoder && i > 0;  // an encoder keeps nothing from layer to layer
    k_cache_.push_back(shared ? k_cache_[0] : state_.add(layer_bytes));
    v_cache_.push_back(shared ? v_cache_[0] : state_.add(layer_bytes));
  }
  // A layer's source caches side by side, each on a binding's alignment (a batch's rows bind
  // their own).
  if (c.cross_attention) {
    source_bytes_ = uint64_t{c.n_ctx} * A * f;
    source_stride_ = vk::align_up(source_bytes_, state_.alignment());
    source_lens_.assign(sources_, 0);
    source_of_.assign(slots_, kNoSource);
  }
  for (uint32_t i = 0; i < (c.cross_attention ? c.n_layer : 0); i++) {
    source_k_.push_back(state_.add(source_stride_ * (sources_ - 1) + source_bytes_));
    source_v_.push_back(state_.add(source_stride_ * (sources_ - 1) + source_bytes_));
  }
  slot_len_.assign(slots_, 0);
  // The split kernel's partial results; the tiled kernel splits a short prompt's keys in the
  // same scratch.
  // And the split kernel's counts of finished key blocks, so that it merges them in the same
  // dispatch: for as many queries as one call has (a decode step's, a batch's rows).
  if (gpu::attention_needs_scratch(ops_.policy(), slots_, kv_cache_)) {
    split_ = state_.add(gpu::attention_model_scratch_bytes(ops_.policy(), c.n_ctx, c.attn_width(), c.n_head));
    if (ops_.policy().tuning.split_merge_fused)
      split_counts_ =
          state_.add(uint64_t{std::max(gpu::kAttentionSplitMaxT, slots_)} * c.n_head * 4);
  }
  // The top-k's rounds re-read their scratch: device memory, not host memory over the bus.
  const uint32_t k = std::min(Model::kMaxCandidates, c.n_vocab);
  scratch_ = state_.add(std::max<uint64_t>(4, gpu::topk_scratch_bytes(ops_, c.n_vocab, k)));
  state_.allocate(vk::MemoryKind::Device);
  if (split_counts_) {  // zero once; every split dispatch leaves them zero
    const vk::BufferSpan counts = state_.span(*split_counts_);
    const std::vector<uint8_t> zeros(counts.size, 0);
    vk::upload(device_, counts, zeros.data(), counts.size);
  }

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
  if (c.n_types) types_ = params_.add(T * 4);
  params_.allocate(vk::MemoryKind::Parameters);
  if (slots_ > 1) {
    gpu::AttentionOptions o;
    o.cache = kv_cache_;
    if (split_) o.scratch = &state_.span(*split_);
    batch_attention_ =
        gpu::attention_store_batch_unsupported(ops_, {.k_caches = state_.span(k_cache_[0]),
                                                      .v_caches = state_.span(v_cache_[0]),
                                                      .qkv = state_.span(qkv_),
                                                      .T = slots_,
                                                      .max_len = slot_ctx_,
                                                      .C = c.attn_width(),
                                                      .H = c.n_head,
                                                      .options = o})
            .empty();
  }
  ensure_logits(1);
}

// The logits buffer holds the most rows asked for so far: one for generation, T for logits().
void GpuModel::ensure_logits(uint32_t rows) {
  if (rows <= logit_rows_) return;
  const uint64_t bytes = uint64_t(rows) * std::max(config_.n_vocab, config_.head_width()) * 4;
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

// One arena per tapped layer, each [H, T, L] of this pass (each must fit one binding), and
// with cross-attention one more, [H, T, S] over the source.
void GpuModel::ensure_attention_taps(uint32_t T, uint32_t L) {
  const Config& c = config_;
  const auto ensure = [&](std::vector<std::unique_ptr<vk::Arena>>& arenas,
                          std::vector<vk::BufferSpan>& spans, uint64_t keys) {
    const uint64_t bytes = uint64_t{c.n_head} * T * keys * sizeof(float);
    spans.assign(c.n_layer, {});
    arenas.resize(c.n_layer);
    for (uint32_t i = 0; i < c.n_layer; i++) {
      if (!attention_tapped(i)) continue;
      if (!arenas[i] || arenas[i]->capacity() < bytes) {
        arenas[i].reset();
        arenas[i] = std::make_unique<vk::Arena>(device_, bytes, vk::MemoryKind::Device,
                                                "attention probabilities");
      }
      arenas[i]->reset();
      spans[i] = arenas[i]->alloc(bytes);
    }
  };
  ensure(probs_arenas_, probs_spans_, L);
  if (const uint32_t S = c.cross_attention ? slot_source_length(0) : 0; S > 0)
    ensure(cross_probs_arenas_, cross_probs_spans_, S);
}

GpuState GpuModel::pass_state() const {
  GpuState s;
  s.x = state_.span(x_), s.h = state_.span(h_), s.att = state_.span(att_);
  s.qkv = state_.span(qkv_), s.fc = state_.span(fc_);
  if (gate_) s.gate = state_.span(*gate_);
  s.logits = logits_;
  for (uint32_t i = 0; i < config_.n_layer; i++) {
    s.k_cache.push_back(state_.span(k_cache_[i]));
    s.v_cache.push_back(state_.span(v_cache_[i]));
  }
  for (size_t i = 0; i < source_k_.size(); i++) {
    s.source_k.push_back(state_.span(source_k_[i]));
    s.source_v.push_back(state_.span(source_v_[i]));
  }
  s.source_bytes = source_bytes_, s.source_stride = source_stride_;
  s.source_lens = source_lens_, s.source_of = source_of_;
  s.slot_bytes = slot_bytes_, s.slot_stride = slot_stride_;
  s.kv_cache = kv_cache_;
  s.ids = params_.span(ids_), s.step = params_.span(step_), s.batch_rows = params_.span(batch_rows_);
  if (types_) s.types = params_.span(*types_);
  s.partials = io_.span(partials_);
  if (split_) s.split = state_.span(*split_);
  if (split_counts_) s.split_counts = state_.span(*split_counts_);
  s.batch_attention = batch_attention_;
  s.taps = tap_spans_;
  s.probs = probs_spans_;
  s.cross_probs = cross_probs_spans_;
  return s;
}

Pass GpuModel::plan_pass(uint32_t T, uint32_t pos, bool all_rows, uint32_t k, bool last) const {
  const Config& c = config_;
  Pass p;
  p.T = T, p.pos = pos;
  // Greedy decoding on an interleaved head finds the best logit in the head's own pass.
  // (matmul_argmax adds no bias: a head with one takes the logits and the top-k.)
  const bool argmax = !all_rows && k == 1 && !w_.head.b &&
                      gpu::argmax_head(w_.head.w->layout, c.n_vocab);
  p.head = all_rows ? Head::AllRows
           : !last   ? Head::None
           : argmax  ? Head::LastArgmax
                     : Head::LastRow;
  // Blocks per submission: as asked, or by the pass's estimated cost.
  const DType wdtype = weight_dtype();
  const SubmissionRates rates = this->rates();
  p.split = split_layers_ ? split_layers_
            : automatic() ? blocks_per_submission(c, T, pos + T, wdtype, rates)
                          : 0;
  // The head goes with the last submission's blocks, or where together they would be over
  // budget, in a submission of its own.
  const uint32_t blocks = p.split ? p.split : c.n_layer;
  const uint32_t tail = c.n_layer % blocks ? c.n_layer % blocks : blocks;
  const double each = block_seconds(c, T, pos + T, wdtype, rates);
  const double head_s = p.head == Head::None ? 0 : head_seconds(c, all_rows ? T : 1, wdtype, rates);
  p.head_apart = automatic() && head_s > 0 && tail * each + head_s > rates.budget_s;
  p.longest_s = p.head_apart ? std::max(blocks * each, head_s) : blocks * each + head_s;
  return p;
}

void GpuModel::record_pass(const Pass& p, uint32_t k, bool dry) {
  // The longest submission's expected time sets how long a wait for it may take.
  if (!device_.fence_timeout_set())
    rec_.set_timeout(model::submission_timeout(p.longest_s, device_.fence_timeout_s()));
  if (dry)
    rec_.begin_dry();
  else
    rec_.begin();
  const GpuState s = pass_state();
  GpuBackend b{ops_, rec_, config_, w_, s, p};
  forward(b, config_, w_, p.T, p.pos, p.head);
  if (p.head == Head::LastRow && k > 0)
    gpu::topk(ops_, rec_,
              {.out_ids = io_.span(top_ids_),
               .out_values = io_.span(top_values_),
               .logits = logits_,
               .scratch = state_.span(scratch_),
               .V = config_.n_vocab,
               .k = k});
  rec_.end();
}

// One pass, or a long prompt's chunks one after another (each fills the cache the next
// attends to); the outputs are gathered as one pass would give them.
void GpuModel::run_at(std::optional<uint32_t> slot, uint32_t pos, std::span<const int32_t> ids,
                      bool all_rows, uint32_t k, std::vector<float>& logits,
                      std::vector<int32_t>& top_ids) {
  const Config& c = config_;
  const auto T = static_cast<uint32_t>(ids.size());
  const uint32_t L = pos + T, V = c.n_vocab, C = c.n_embd, H = c.n_head;
  // The taps are logits()'s: a slot's pass keeps none.
  const bool taps = !slot && taps_on_ && all_rows, attention = !slot && attention_on_ && all_rows;
  if (all_rows) logits.resize(size_t(T) * V);
  if (taps) taps_.assign(c.n_layer, std::vector<float>(size_t(T) * C));
  const uint32_t S = c.cross_attention ? slot_source_length(0) : 0;
  const bool cross = attention && c.cross_attention;
  cross_attention_.clear();
  if (attention) {
    attention_.assign(c.n_layer, {});
    if (cross) cross_attention_.assign(c.n_layer, {});
    for (uint32_t i = 0; i < c.n_layer; i++) {
      if (!attention_tapped(i)) continue;
      attention_[i].assign(size_t(H) * T * L, 0.0f);
      if (cross) cross_attention_[i].assign(size_t(H) * T * S, 0.0f);
    }
  }
  const std::vector<uint32_t> parts = chunks(T, pos, all_rows);
  vk::RecorderStats sum;
  std::vector<float> probs;
  uint32_t done = 0;
  for (size_t part = 0; part < parts.size(); done += parts[part++]) {
    const uint32_t t = parts[part], at = pos + done, Lt = at + t;
    const bool last = part + 1 == parts.size();
    const Head head = run_pass(slot, ids.subspan(done, t), at, all_rows, k, last);
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
      if (!cross) continue;  // [H, t, S] into rows done.. of [H, T, S]
      probs.resize(size_t(H) * t * S);
      vk::download(device_, probs.data(), cross_probs_spans_[i], probs.size() * 4);
      for (uint32_t h = 0; h < H; h++)
        std::memcpy(cross_attention_[i].data() + (size_t(h) * T + done) * S,
                    probs.data() + size_t(h) * t * S, size_t(t) * S * 4);
    }
  }
  stats_ = sum;
}

void GpuModel::write_params(std::span<const int32_t> ids, std::span<const int32_t> types,
                            uint32_t pos) {
  rec_.wait();  // a submission still running (after a timed-out wait) may read what follows
  std::memcpy(params_.span(ids_).mapped, ids.data(), ids.size_bytes());
  if (types_ && !types.empty())
    std::memcpy(params_.span(*types_).mapped, types.data(), types.size_bytes());
  std::memcpy(params_.span(step_).mapped, &pos, sizeof pos);
}

Head GpuModel::run_pass(std::optional<uint32_t> slot, std::span<const int32_t> ids, uint32_t pos,
                        bool all_rows, uint32_t k, bool last) {
  const auto T = static_cast<uint32_t>(ids.size());
  Pass p = plan_pass(T, pos, all_rows, k, last);
  p.slot = slot.value_or(0);
  p.taps = !slot && taps_on_ && all_rows;
  p.attention_taps = !slot && attention_on_ && all_rows;
  ensure_logits(all_rows ? T : 1);
  if (p.taps) ensure_taps();
  if (p.attention_taps) ensure_attention_taps(T, pos + T);
  write_params(ids, {}, pos);

  // A decode step: a dry recording says whether the last recording would be recorded again;
  // then it is submitted as it is (no descriptor writes, no commands), else recorded anew.
  const auto t0 = std::chrono::steady_clock::now();
  submit_pass(p, k, T == 1 && !all_rows);
  rec_.wait();
  // How fast the device ran this pass against the nominal rates: later passes are cut into
  // submissions by what it can do (rates()).
  if (automatic() && !rates_) {
    const SubmissionRates nominal;
    const DType wdtype = weight_dtype();
    const double nominal_s =
        config_.n_layer * block_seconds(config_, T, pos + T, wdtype, nominal) +
        (p.head == Head::None ? 0 : head_seconds(config_, all_rows ? T : 1, wdtype, nominal));
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    speed_ = std::max(speed_, observed_speed(nominal_s, wall_s));
  }
  return p.head;
}

void GpuModel::encode(std::span<const int32_t> ids, std::span<const int32_t> types, bool head,
                      Encoded& out) {
  const Config& c = config_;
  const auto T = static_cast<uint32_t>(ids.size());
  Pass p = plan_pass(T, 0, true, 0);
  p.head = head ? Head::AllRows : Head::None;
  const uint32_t rows = head ? c.head_rows(T) : 1;
  p.attention_taps = attention_on_;
  ensure_logits(rows);
  if (p.attention_taps) ensure_attention_taps(T, T);
  write_params(ids, types, 0);
  submit_pass(p, 0, false);
  rec_.wait();
  stats_ = rec_.stats();
  out.hidden.resize(size_t{T} * c.n_embd);
  const size_t hidden = encoder_output(c) == Buf::H ? h_ : x_;
  vk::download(device_, out.hidden.data(), state_.span(hidden), out.hidden.size() * 4);
  attention_.clear();
  if (p.attention_taps) {  // each tapped layer's [H, T, T], as the pass wrote it
    attention_.assign(c.n_layer, {});
    for (uint32_t i = 0; i < c.n_layer; i++) {
      if (!attention_tapped(i)) continue;
      attention_[i].resize(size_t{c.n_head} * T * T);
      vk::download(device_, attention_[i].data(), probs_spans_[i], attention_[i].size() * 4);
    }
  }
  out.logits.clear();
  if (!head) return;
  out.logits.resize(size_t{rows} * c.head_width());
  vk::download(device_, out.logits.data(), logits_, out.logits.size() * 4);
}

void GpuModel::encode_batch(std::span<const EncoderInput> inputs,
                            std::vector<std::vector<float>>& hidden) {
  const Config& c = config_;
  hidden.assign(inputs.size(), {});
  // Longest first, so that a pass's sequences are of like lengths and pad little.
  std::vector<size_t> order(inputs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return inputs[a].ids.size() > inputs[b].ids.size();
  });
  const size_t hidden_buf = encoder_output(c) == Buf::H ? h_ : x_;
  vk::RecorderStats sum;
  std::vector<int32_t> ids, types;
  std::vector<float> rows;
  for (size_t i = 0; i < order.size();) {
    if (attention_on_) {  // the tap keeps one sequence's maps: encode()'s own pass
      Encoded out;
      encode(inputs[order[i]].ids, inputs[order[i]].types, false, out);
      sum += stats_;
      hidden[order[i++]] = std::move(out.hidden);
      continue;
    }
    const auto longest = static_cast<uint32_t>(inputs[order[i]].ids.size());
    auto period = static_cast<uint32_t>(vk::align_up(longest, segment_rows_));
    size_t n = std::min({size_t{encoder_batch_}, size_t{rows_ / period}, order.size() - i});
    if (n < 2) n = 1, period = longest;
    // Every pass takes the prompts' kernels, more than kMatmulVecRows rows (a short sequence
    // alone is padded to that), so a sequence's hidden states are the same bits whatever
    // shares its pass: the kernels for fewer rows reduce in another order, and each row of the
    // prompts' kernels is computed alike wherever it sits (tests/test_bert.cpp). The server
    // batches requests together on that (apps/serve/encode_queue.h).
    // (In whole periods, as the embedding restarts positions by them; a model of fewer rows
    // than that, a toy, goes unpadded.)
    auto T = static_cast<uint32_t>(n * period);
    if (const auto padded = static_cast<uint32_t>(vk::align_up(gpu::kMatmulVecRows + 1, period));
        T < padded)
      T = padded <= rows_ ? padded : T;
    // Padding rows hold token 0 of type 0: computed, never attended to, never read back.
    Segments seg{period, {}};
    ids.assign(T, 0);
    types.assign(T, 0);
    for (size_t b = 0; b < n; b++) {
      const EncoderInput& in = inputs[order[i + b]];
      const auto first = static_cast<std::ptrdiff_t>(b * period);
      std::copy(in.ids.begin(), in.ids.end(), ids.begin() + first);
      std::copy(in.types.begin(), in.types.end(), types.begin() + first);
      seg.lens.push_back(static_cast<uint32_t>(in.ids.size()));
    }
    Pass p = plan_pass(T, 0, true, 0);
    p.head = Head::None;
    p.segments = &seg;
    write_params(ids, types, 0);
    submit_pass(p, 0, false);
    rec_.wait();
    sum += rec_.stats();
    rows.resize(size_t{T} * c.n_embd);
    vk::download(device_, rows.data(), state_.span(hidden_buf), rows.size() * 4);
    for (size_t b = 0; b < n; b++) {
      const float* first = rows.data() + b * period * c.n_embd;
      hidden[order[i + b]].assign(first, first + size_t{seg.lens[b]} * c.n_embd);
    }
    i += n;
  }
  stats_ = sum;
}

void GpuModel::submit_pass(const Pass& p, uint32_t k, bool replayable) {
  if (replay_ && replayable) {
    record_pass(p, k, true);
    if (rec_.dry_matches()) {
      rec_.replay();
      return;
    }
  }
  record_pass(p, k, false);
  rec_.submit();
}

std::unique_ptr<Model> make_gpu_model(const Checkpoint& checkpoint, const vk::Device& device,
                                      const GpuModelOptions& options) {
  require_family(checkpoint, Family::Decoder);
  return std::make_unique<GpuModel>(checkpoint, device, options);
}

std::unique_ptr<Encoder> make_gpu_encoder(const Checkpoint& checkpoint, const vk::Device& device,
                                          const GpuModelOptions& options) {
  require_family(checkpoint, Family::Encoder);
  if (options.slots > 1)
    throw std::runtime_error("an encoder has no cache: slots are for decoders");
  return std::make_unique<EncoderOver<GpuModel>>(checkpoint, device, options);
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

const vk::RecorderStats& gpu_stats(const Encoder& encoder) {
  return dynamic_cast<const EncoderOver<GpuModel>&>(encoder).model().stats();
}

std::vector<vk::DispatchTime> gpu_timings(const Encoder& encoder) {
  return dynamic_cast<const EncoderOver<GpuModel>&>(encoder).model().timings();
}

std::string gpu_kernels(const Model& model) {
  return dynamic_cast<const GpuModel&>(model).policy().describe();
}

}  // namespace model
