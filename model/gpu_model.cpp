// The GPU forward pass: model/graph.h recorded through the gpu:: ops into one command buffer.
#include "model/gpu_model.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "model/checkpoint.h"
#include "model/gpu/activation.h"
#include "model/gpu/attention.h"
#include "model/gpu/common.h"
#include "model/gpu/embedding.h"
#include "model/gpu/layernorm.h"
#include "model/gpu/matmul.h"
#include "model/gpu/topk.h"
#include "model/graph.h"
#include "model/progress.h"
#include "vk/check.h"

namespace model {
namespace {

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

constexpr uint64_t kFuseNormBytes = uint64_t{1} << 20;

// Tensors packed into as few arenas as the device's allocation limit allows (1 GiB at most
// each, which every driver accepts as one buffer). The sizes are known up front, so every
// arena is allocated once at its exact size.
class Packer {
 public:
  Packer(const vkr::Device& device, std::string name) : device_(device), name_(std::move(name)) {
    align_ = std::max<uint64_t>(16, device.caps().storage_buffer_alignment);
    cap_ = std::min<uint64_t>(device.caps().max_allocation, uint64_t(1) << 30);
  }
  // Plans a span of `bytes`; returns its handle for span().
  size_t add(uint64_t bytes) {
    bytes = align_up(bytes, align_);
    if (bytes > cap_)
      throw vkr::Error(name_ + ": a tensor of " + std::to_string(bytes) +
                       " bytes is larger than one allocation can be on '" + device_.caps().name +
                       "' (" + std::to_string(cap_) + " bytes)");
    if (sizes_.empty() || sizes_.back() + bytes > cap_) sizes_.push_back(0);
    items_.push_back({sizes_.size() - 1, sizes_.back(), bytes});
    sizes_.back() += bytes;
    return items_.size() - 1;
  }
  void allocate(vkr::MemoryKind kind) {
    for (size_t i = 0; i < sizes_.size(); i++)
      arenas_.emplace_back(device_, std::max<uint64_t>(sizes_[i], align_), kind,
                           name_ + " " + std::to_string(i));
    for (Item& it : items_) it.span = arenas_[it.arena].alloc(it.bytes);
  }
  const vkr::BufferSpan& span(size_t handle) const { return items_[handle].span; }
  uint64_t alignment() const { return align_; }
  uint64_t total() const {
    uint64_t t = 0;
    for (uint64_t s : sizes_) t += s;
    return t;
  }

 private:
  struct Item {
    size_t arena;
    uint64_t offset, bytes;
    vkr::BufferSpan span;
  };
  const vkr::Device& device_;
  std::string name_;
  uint64_t align_, cap_;
  std::vector<uint64_t> sizes_;
  std::vector<Item> items_;
  std::deque<vkr::Arena> arenas_;
};

class GpuModel;

// A LayerNorm whose output only feeds the next linear layer (pre-norm: ln_1 -> c_attn,
// ln_2 -> c_fc) waits here, so that linear() can fuse it into a small interleaved matmul.
struct PendingNorm {
  Buf out, in;
  const gpu::Weight *gamma, *beta;
  uint32_t T;
};

struct GpuBackend {
  GpuModel& m;
  std::optional<PendingNorm> pending;
  void flush_norm();
  const vkr::BufferSpan& buf(Buf b) const;
  void embed(uint32_t T, uint32_t pos);
  void layernorm(Buf out, Buf in, const gpu::Weight* gamma, const gpu::Weight* beta, uint32_t T);
  void linear(Buf out, Buf in, const gpu::Weight* w, const gpu::Weight* bias, const Buf* residual,
              uint32_t T, uint32_t K, uint32_t N, gpu::Activation act, gpu::WeightLayout layout,
              uint32_t in_row);
  void attention(uint32_t layer, uint32_t T, uint32_t pos);
  void tap(uint32_t layer, uint32_t T);
};

class GpuModel final : public Model {
 public:
  GpuModel(const Checkpoint& ckpt, const vkr::Device& device, const GpuModelOptions& o)
      : config_(ckpt.config()),
        device_(device),
        precision_(o.precision),
        split_layers_(o.split_layers),
        kernels_(device.kernels()),
        weights_(device, "weights"),
        state_(device, "activations"),
        io_(device, "io"),
        rec_(device, o.timestamps) {
    upload_weights(ckpt, o.progress);
    plan_state();
  }

  const Config& config() const override { return config_; }
  std::string device_name() const override { return device_.caps().name; }
  Precision precision() const override { return precision_; }
  const vkr::RecorderStats& stats() const { return stats_; }
  std::vector<vkr::DispatchTime> timings() const { return rec_.timings(); }

 protected:
  void run(std::span<const int32_t> ids, bool all_rows, uint32_t k, std::vector<float>& logits,
           std::vector<int32_t>& top_ids) override;

 private:
  friend struct GpuBackend;
  gpu::WeightLayout matrix_layout(const ExpectedTensor& e, gpu::DType dtype,
                                  gpu::WeightLayout& from) const;
  void upload_weights(const Checkpoint& ckpt, bool progress);
  bool interleaved(const gpu::Weight* w) const { return interleaved_.count(w) != 0; }
  // LayerNorms fused into the small matmuls after them (gpu::MatmulNorm): on devices that
  // interleave, whose texel-aligned LayerNorm parameters can be read as texels.
  bool fuse_norms() const { return !interleaved_.empty(); }
  void plan_state();
  void ensure_logits(uint32_t rows);
  void ensure_taps();

  Config config_;
  const vkr::Device& device_;
  Precision precision_;
  uint32_t split_layers_;  // blocks per submission; 0 = the whole pass in one
  vkr::Kernels& kernels_;  // the device's, shared with its other models
  vkr::RecorderStats stats_;

  Packer weights_;
  std::map<std::string, gpu::Weight> tensors_;
  ModelWeights<const gpu::Weight*> w_;
  std::set<const gpu::Weight*> interleaved_;  // matrices in WeightLayout::Interleaved

  Packer state_;  // activations and the KV cache
  size_t x_, h_, qkv_, att_, fc_;
  std::vector<size_t> k_cache_, v_cache_;
  Packer io_;     // host-visible: ids in, best candidates out
  size_t ids_, top_ids_, top_values_, scratch_;
  size_t partials_;      // greedy decoding: the head's argmax partials (gpu::matmul_argmax)
  bool argmax_ = false;  // this pass: the head is matmul_argmax, not logits and a top-k

  std::unique_ptr<vkr::Arena> logits_arena_;  // [rows, V], grown when more rows are asked for
  vkr::BufferSpan logits_;
  uint32_t logit_rows_ = 0;
  std::unique_ptr<vkr::Arena> taps_arena_;
  std::vector<vkr::BufferSpan> tap_spans_;  // [layer][n_ctx, C]
  // Last: destroyed first, so a pending submission settles before the memory it uses is freed.
  vkr::Recorder rec_;
};

// A matrix's K (inputs) and N (outputs), given the layout the checkpoint stores it in.
uint32_t matrix_k(const ExpectedTensor& e, gpu::WeightLayout from) {
  return static_cast<uint32_t>(from == gpu::WeightLayout::NK ? e.shape[1] : e.shape[0]);
}
uint32_t matrix_n(const ExpectedTensor& e, gpu::WeightLayout from) {
  return static_cast<uint32_t>(from == gpu::WeightLayout::NK ? e.shape[0] : e.shape[1]);
}

// The layout a matrix is stored in: on devices whose fast path is the interleaved texel kernel
// (CPU devices), every matrix the matmul reads, the tied wte included (embedding reads it there);
// elsewhere as the checkpoint has it. Returns KN, NK or Interleaved; `from` gets the
// checkpoint's own layout.
gpu::WeightLayout GpuModel::matrix_layout(const ExpectedTensor& e, gpu::DType dtype,
                                          gpu::WeightLayout& from) const {
  const bool rows_out = e.name == "wte.weight" || e.name == "lm_head.weight";
  from = rows_out ? gpu::WeightLayout::NK : gpu::WeightLayout::KN;
  const bool matmul_reads = e.name != "wpe.weight" &&
                            (e.name != "wte.weight" || config_.tie_word_embeddings);
  const vkr::DeviceCaps& caps = device_.caps();
  const uint32_t K = matrix_k(e, from);
  const bool fast = gpu::matmul_prefers_texel(caps) &&
                    gpu::matmul_interleaved_supported(caps, dtype, K) &&
                    caps.texel_buffer_alignment <= weights_.alignment() &&
                    caps.texel_buffer_alignment <= state_.alignment();
  return matmul_reads && fast ? gpu::WeightLayout::Interleaved : from;
}

void GpuModel::upload_weights(const Checkpoint& ckpt, bool progress) {
  const std::vector<ExpectedTensor> expected = expected_tensors(config_);
  struct Plan {
    size_t handle;
    gpu::DType dtype;
    gpu::WeightLayout layout, from;
  };
  std::vector<Plan> plans;
  uint64_t total = 0;
  for (const ExpectedTensor& e : expected) {
    // Matrices take the chosen precision; LayerNorm parameters and biases stay fp32.
    const bool matrix = e.shape.size() == 2;
    Plan p{0, matrix && precision_ == Precision::F16 ? gpu::DType::F16 : gpu::DType::F32,
           gpu::WeightLayout::KN, gpu::WeightLayout::KN};
    if (matrix) p.layout = matrix_layout(e, p.dtype, p.from);
    const uint64_t n = ckpt.tensor(e.name).elements();
    const uint64_t bytes = p.layout == gpu::WeightLayout::Interleaved
                               ? gpu::interleaved_bytes(p.dtype, matrix_k(e, p.from), matrix_n(e, p.from))
                               : align_up(n * gpu::dtype_bytes(p.dtype), 4);  // whole fp16 pairs
    p.handle = weights_.add(bytes);
    plans.push_back(p);
    total += bytes;
  }
  weights_.allocate(vkr::MemoryKind::Device);

  Progress bar("uploading weights", progress ? total : 0);
  std::vector<uint8_t> host, plain;
  for (size_t i = 0; i < expected.size(); i++) {
    const ExpectedTensor& e = expected[i];
    const TensorView& src = ckpt.tensor(e.name);
    const vkr::BufferSpan& dst = weights_.span(plans[i].handle);
    const uint64_t n = src.elements();
    const bool interleaved = plans[i].layout == gpu::WeightLayout::Interleaved;
    // Convert straight into mapped memory where the device has it (UMA), else via a host copy;
    // an interleaved matrix is converted first, then repacked.
    uint8_t* out = dst.mapped;
    if (!out) {
      host.assign(dst.size, 0);
      out = host.data();
    }
    uint8_t* converted = out;
    if (interleaved) {
      plain.resize(n * gpu::dtype_bytes(plans[i].dtype));
      converted = plain.data();
    }
    const bool f16 = plans[i].dtype == gpu::DType::F16;
    const uint64_t bad = f16 ? to_f16(src, reinterpret_cast<uint16_t*>(converted), 0, n)
                             : to_f32(src, reinterpret_cast<float*>(converted), 0, n);
    warn_nonfinite(ckpt, e.name, bad, n, f16 && src.dtype != TensorDType::F16 ? "f16" : nullptr);
    if (interleaved)
      gpu::interleave(out, converted, plans[i].from, plans[i].dtype, matrix_k(e, plans[i].from),
                      matrix_n(e, plans[i].from));
    if (!dst.mapped) vkr::upload(device_, dst, host.data(), dst.size);
    bar.advance(dst.size);
    tensors_[e.name] = gpu::Weight{dst, plans[i].dtype};
    if (interleaved) interleaved_.insert(&tensors_[e.name]);
  }
  bar.finish();
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
  for (uint32_t i = 0; i < c.n_layer; i++) {
    k_cache_.push_back(state_.add(T * C * f));
    v_cache_.push_back(state_.add(T * C * f));
  }
  state_.allocate(vkr::MemoryKind::Device);

  const uint32_t k = std::min(Model::kMaxCandidates, c.n_vocab);
  ids_ = io_.add(T * 4);
  top_ids_ = io_.add(k * 4);
  top_values_ = io_.add(k * 4);
  scratch_ = io_.add(std::max<uint64_t>(4, gpu::topk_scratch_bytes(device_.caps(), c.n_vocab, k)));
  partials_ = io_.add(uint64_t{2} * gpu::matmul_argmax_partials(c.n_vocab) * 4);
  io_.allocate(vkr::MemoryKind::Staging);
  ensure_logits(1);
}

// The logits buffer holds the most rows asked for so far: one for generation, T for logits().
void GpuModel::ensure_logits(uint32_t rows) {
  if (rows <= logit_rows_) return;
  const uint64_t bytes = uint64_t(rows) * config_.n_vocab * 4;
  logits_arena_.reset();
  logits_arena_ = std::make_unique<vkr::Arena>(device_, bytes, vkr::MemoryKind::Device, "logits");
  logits_ = logits_arena_->alloc(bytes);
  logit_rows_ = rows;
}

void GpuModel::ensure_taps() {
  if (taps_arena_) return;
  const Config& c = config_;
  const uint64_t align = std::max<uint64_t>(16, device_.caps().storage_buffer_alignment);
  const uint64_t each = align_up(uint64_t(c.n_ctx) * c.n_embd * 4, align);
  taps_arena_ = std::make_unique<vkr::Arena>(device_, each * c.n_layer, vkr::MemoryKind::Device, "taps");
  for (uint32_t i = 0; i < c.n_layer; i++) tap_spans_.push_back(taps_arena_->alloc(each));
}

void GpuModel::run(std::span<const int32_t> ids, bool all_rows, uint32_t k,
                   std::vector<float>& logits, std::vector<int32_t>& top_ids) {
  const Config& c = config_;
  const auto T = static_cast<uint32_t>(ids.size());
  const uint32_t rows = all_rows ? T : 1, V = c.n_vocab;
  ensure_logits(rows);
  if (taps_on_ && all_rows) ensure_taps();
  std::memcpy(io_.span(ids_).mapped, ids.data(), ids.size_bytes());

  // Greedy decoding on an interleaved head finds the best logit in the head's own pass.
  argmax_ = !all_rows && k == 1 && interleaved(w_.head) && V <= (1u << 24);
  rec_.begin();
  GpuBackend b{*this, {}};
  forward(b, c, w_, T, length(), !all_rows);
  b.flush_norm();
  const bool best_k = !all_rows && k > 0 && !argmax_;
  if (best_k)
    gpu::topk(kernels_, rec_, io_.span(top_ids_), io_.span(top_values_), logits_,
              io_.span(scratch_), V, k);
  rec_.end();
  rec_.submit();
  rec_.wait();
  stats_ = rec_.stats();

  if (argmax_) {
    const auto [id, value] = gpu::argmax_of_partials(
        reinterpret_cast<const float*>(io_.span(partials_).mapped), gpu::matmul_argmax_partials(V));
    if (id < 0) throw vkr::Error("every logit is NaN: the model's weights or activations are broken");
    top_ids.assign(1, id);
    logits.assign(1, value);
  } else if (best_k) {
    top_ids.resize(k);
    logits.resize(k);
    std::memcpy(top_ids.data(), io_.span(top_ids_).mapped, k * 4);
    std::memcpy(logits.data(), io_.span(top_values_).mapped, k * 4);
  } else {
    logits.resize(size_t(rows) * V);
    vkr::download(device_, logits.data(), logits_, logits.size() * 4);
  }
  if (taps_on_ && all_rows) {
    taps_.assign(c.n_layer, std::vector<float>(size_t(T) * c.n_embd));
    for (uint32_t i = 0; i < c.n_layer; i++)
      vkr::download(device_, taps_[i].data(), tap_spans_[i], taps_[i].size() * 4);
  }
}

const vkr::BufferSpan& GpuBackend::buf(Buf b) const {
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

void GpuBackend::flush_norm() {
  if (!pending) return;
  const PendingNorm n = *pending;
  pending.reset();
  const Config& c = m.config_;
  gpu::layernorm(m.kernels_, m.rec_, buf(n.out), buf(n.in), n.gamma->span, n.beta->span, n.T,
                 c.n_embd, c.layer_norm_epsilon, c.layer_norm);
}

void GpuBackend::embed(uint32_t T, uint32_t pos) {
  flush_norm();
  const Config& c = m.config_;
  gpu::embedding(m.kernels_, m.rec_, buf(Buf::X), m.io_.span(m.ids_), *m.w_.wte, m.w_.wpe, T,
                 c.n_embd, c.n_vocab, c.n_ctx, pos, c.positions, m.interleaved(m.w_.wte));
}

void GpuBackend::layernorm(Buf out, Buf in, const gpu::Weight* gamma, const gpu::Weight* beta,
                           uint32_t T) {
  flush_norm();
  // Only H, the pre-norm blocks' scratch, is read by nothing but the next linear layer.
  if (out == Buf::H && m.fuse_norms()) {
    pending = PendingNorm{out, in, gamma, beta, T};
    return;
  }
  const Config& c = m.config_;
  gpu::layernorm(m.kernels_, m.rec_, buf(out), buf(in), gamma->span, beta->span, T, c.n_embd,
                 c.layer_norm_epsilon, c.layer_norm);
}

void GpuBackend::linear(Buf out, Buf in, const gpu::Weight* w, const gpu::Weight* bias,
                        const Buf* residual, uint32_t T, uint32_t K, uint32_t N,
                        gpu::Activation act, gpu::WeightLayout layout, uint32_t in_row) {
  // Fuse the waiting LayerNorm where dispatching it would cost more than the reads it adds: a
  // dispatch costs about as much as reading 1 MiB of weights on llvmpipe (~40 us at ~25 GB/s).
  std::optional<gpu::MatmulNorm> norm;
  const uint64_t w_bytes = uint64_t{K} * N * gpu::dtype_bytes(w->dtype);
  const bool argmax = out == Buf::LOGITS && m.argmax_;  // matmul_argmax takes no LayerNorm
  if (pending && in == pending->out && m.interleaved(w) && w_bytes <= kFuseNormBytes &&
      pending->T == T && in_row == 0 && !argmax) {
    const Config& c = m.config_;
    norm = gpu::MatmulNorm{pending->gamma->span, pending->beta->span, c.layer_norm,
                           c.layer_norm_epsilon};
    in = pending->in;
    pending.reset();
  }
  flush_norm();
  if (argmax) {
    gpu::matmul_argmax(m.kernels_, m.rec_, m.io_.span(m.partials_), buf(in), *w, K, N, in_row);
    return;
  }
  if (m.interleaved(w)) layout = gpu::WeightLayout::Interleaved;
  gpu::matmul(m.kernels_, m.rec_, buf(out), buf(in), *w, bias ? &bias->span : nullptr,
              residual ? &buf(*residual) : nullptr, T, K, N,
              {layout, act, gpu::MatmulKernel::Auto, in_row, norm ? &*norm : nullptr});
}

void GpuBackend::attention(uint32_t layer, uint32_t T, uint32_t pos) {
  flush_norm();
  const Config& c = m.config_;
  const vkr::BufferSpan& kc = m.state_.span(m.k_cache_[layer]);
  const vkr::BufferSpan& vc = m.state_.span(m.v_cache_[layer]);
  gpu::attention_store(m.kernels_, m.rec_, buf(Buf::ATT), kc, vc, buf(Buf::QKV), T, pos, c.n_embd,
                       c.n_head, {c.causal, c.attention_scale});
}

void GpuBackend::tap(uint32_t layer, uint32_t T) {
  flush_norm();
  if (m.taps_on_ && m.taps_arena_)
    gpu::activation(m.kernels_, m.rec_, m.tap_spans_[layer], buf(Buf::X), T * m.config_.n_embd,
                    gpu::Activation::None);
  // The end of a block: with split_layers, the end of a submission too (not after the last
  // block, whose submission runs the head).
  const uint32_t n = m.split_layers_;
  if (n && (layer + 1) % n == 0 && layer + 1 < m.config_.n_layer) m.rec_.flush();
}

}  // namespace

std::unique_ptr<Model> make_gpu_model(const Checkpoint& checkpoint, const vkr::Device& device,
                                      const GpuModelOptions& options) {
  return std::make_unique<GpuModel>(checkpoint, device, options);
}

const vkr::RecorderStats& gpu_stats(const Model& model) {
  return dynamic_cast<const GpuModel&>(model).stats();
}

std::vector<vkr::DispatchTime> gpu_timings(const Model& model) {
  return dynamic_cast<const GpuModel&>(model).timings();
}

}  // namespace model
