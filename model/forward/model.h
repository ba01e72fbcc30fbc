// A model ready to run: the CPU reference or a GPU, behind one interface, so the commands and
// the tests drive either the same way. Each keeps a KV cache of the tokens it has seen.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/formats/config.h"

namespace model {

class Checkpoint;

enum class Precision { F32, F16 };  // how weight matrices are stored; activations are fp32
const char* precision_name(Precision p);

// Throws unless every id is in [0, V), naming the first that is not at its position (ids[0] at
// `first`).
void check_vocabulary(std::span<const int32_t> ids, uint32_t V, size_t first = 0);
Precision parse_precision(const std::string& name);  // "f32" | "f16"; throws otherwise

// The k largest logits of one position, best first (ties to the lower id); with k == 0, all V
// logits in id order and no ids.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<float> logits;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const Config& config() const = 0;
  virtual std::string device_name() const = 0;
  virtual Precision precision() const = 0;
  // Whether prompts' matmuls run on the device's matrix units, whose inputs are x and W rounded
  // to fp16 (gpu::KernelPolicy::coop_matrix): compare's tolerance then is fp16's.
  virtual bool matrix_units() const { return false; }

  uint32_t length() const { return length_; }  // tokens in the cache
  void reset() { length_ = 0; }

  // A decoder with cross-attention (Config::cross_attention, an encoder-decoder's decoder_side):
  // the encoder's output its cross-attention reads from now on, hidden [S, C] row-major,
  // 1 <= S <= n_ctx. Each layer's source keys and values are projected from it once, here, and
  // kept for every pass and slot until the next set_source(); the caches are not reset. Passes
  // of such a decoder throw until it has a source.
  void set_source(std::span<const float> hidden);
  uint32_t source_length() const { return slot_source_length(0); }
  // The same for one slot of a decoder with several (GpuModelOptions::slots), into a source
  // cache of its own (slot < GpuModelOptions::sources): that slot reads this source from now on,
  // the others theirs. A slot that read the source cache this overwrites (it shared the slot's
  // source through set_source() or slot_copy()) has none until it is given one. With one slot:
  // set_source().
  void slot_set_source(uint32_t slot, std::span<const float> hidden);
  // The slots 0 .. slot_sources() - 1 may have a source of their own (slot_set_source): a GPU
  // model's GpuModelOptions::sources; 1 otherwise.
  virtual uint32_t slot_sources() const { return 1; }
  // The rows of the source slot's cross-attention reads; 0 for none yet. Slots share a source
  // after set_source() (every slot) and slot_copy() (the copy its original's).
  virtual uint32_t slot_source_length(uint32_t slot) const;

  // Runs ids at positions [length(), length() + n) and appends them to the cache. Throws when
  // they would pass n_ctx or an id is outside the vocabulary.
  // All n positions' logits, [n, V] row-major:
  std::vector<float> logits(std::span<const int32_t> ids);
  // The last position's k best logits (1 <= k <= kMaxCandidates), or all of them with k == 0:
  Candidates next(std::span<const int32_t> ids, uint32_t k);

  // With taps on, logits() also keeps the residual stream after every block: taps()[layer] is
  // [n, C] for the last call. For comparing backends layer by layer.
  void set_taps(bool on) { taps_on_ = on; }
  const std::vector<std::vector<float>>& taps() const { return taps_; }

  // The attention tap: with it on, logits() also keeps the softmax weights of every layer, or
  // of `only_layer`, from the same kernels as the pass itself (a GPU records their *_probs
  // variants only while the tap is on). attention_probs()[layer] is [H, n, L] for the last call
  // of n tokens (L = length() after it): probs[h][t][j] is query t's weight on key j, 0 for keys
  // a causal query does not see; empty for a layer not tapped.
  void set_attention_taps(bool on, std::optional<uint32_t> only_layer = std::nullopt) {
    attention_on_ = on;
    attention_layer_ = only_layer;
  }
  const std::vector<std::vector<float>>& attention_probs() const { return attention_; }
  // A decoder with cross-attention (an encoder-decoder's): its weights over the source, from
  // the same pass and for the same layers, [layer][H, n, S] for a source of S tokens; empty
  // for a layer not tapped.
  const std::vector<std::vector<float>>& cross_attention_probs() const { return cross_attention_; }

  // What loading the weights found worth telling: one line per tensor holding NaN or infinite
  // values ("<file>: <tensor>: 3 of 3072 values are NaN or infinite"). Not errors: the model
  // still runs, though its logits will likely be NaN where such a weight takes part.
  const std::vector<std::string>& warnings() const { return warnings_; }

  static constexpr uint32_t kMaxCandidates = 256;

  // Several sequences at once (gpt2vk serve): slot s keeps a KV cache of its own, of
  // slot_context() tokens. Every model has slot 0, the cache logits() and next() use; a GPU model
  // made with GpuModelOptions::slots has more, and decodes them together.
  struct SlotToken {
    uint32_t slot;
    int32_t id;
  };
  virtual uint32_t slots() const { return 1; }
  virtual uint32_t slot_context() const { return config().n_ctx; }
  virtual uint32_t slot_length(uint32_t slot) const;
  virtual void slot_reset(uint32_t slot);
  // Keeps the first n of slot's cached tokens (n <= slot_length(slot)): the next pass runs at
  // position n and writes over what lay past it, which no pass reads (a row attends only to
  // keys below its own position). Prompt-prefix reuse (gpt2vk serve) keeps a prefix this way.
  virtual void slot_truncate(uint32_t slot, uint32_t n);
  // Runs ids after slot's cached tokens: every row's V logits ([n, V]) or the last row's.
  virtual std::vector<float> slot_prefill(uint32_t slot, std::span<const int32_t> ids,
                                          bool all_rows);
  // One new token for each of several slots (each at most once), in one pass: [rows, V], row b
  // the logits after rows[b].id. A row's logits do not depend on the other rows: its matmuls
  // reduce in the same order whatever their count, and each row attends alone.
  virtual std::vector<float> slot_decode(std::span<const SlotToken> rows);
  // Beam search's reorder: for each (from, to), slot to's cache becomes a copy of slot from's,
  // its length too, on the device (nothing passes through the host). No slot may be both a
  // source and a destination, nor a destination twice.
  struct SlotCopy {
    uint32_t from, to;
  };
  virtual void slot_copy(std::span<const SlotCopy> copies);

  // Makes ready what generate() will use to continue a prompt of `prompt_tokens` ids by
  // `max_new` tokens, each pass with this k, its window sliding at `window` tokens (0: n_ctx;
  // GenerateOptions::context): a GPU model compiles exactly those pipelines now, in parallel,
  // so that no pass waits for a compiler (progress: pipelines done of total).
  // Returns how many it compiled; the CPU reference has nothing to prepare.
  virtual size_t prepare(uint32_t prompt_tokens, uint32_t max_new, uint32_t k, uint32_t window = 0,
                         const std::function<void(size_t, size_t)>& progress = {}) {
    (void)prompt_tokens, (void)max_new, (void)k, (void)window, (void)progress;
    return 0;
  }
  // A decoder with cross-attention: makes ready, as prepare() does, what decoding after a
  // set_source() of S rows will use: the source's pass, then `max_new` one-token passes from
  // the start (each with this k) and, with slots, their batches (beam search's steps).
  // With own_sources, every slot's batches as slots with sources of their own decode them
  // (slot_set_source: greedy decoding of several sources together), else as beams of one.
  virtual size_t prepare_source(uint32_t S, uint32_t max_new, uint32_t k, bool own_sources,
                                const std::function<void(size_t, size_t)>& progress = {}) {
    (void)S, (void)max_new, (void)k, (void)own_sources, (void)progress;
    return 0;
  }

 protected:
  // The source pass of set_source(): S rows, checked.
  virtual void run_source(std::span<const float> hidden, uint32_t S) {
    (void)hidden, (void)S;
  }
  // slot_set_source()'s, on a model with more than one slot.
  virtual void run_slot_source(uint32_t slot, std::span<const float> hidden, uint32_t S) {
    (void)slot, (void)hidden, (void)S;
  }
  // One forward pass over ids at position length_; all rows' logits or the last row's best k.
  virtual void run(std::span<const int32_t> ids, bool all_rows, uint32_t k, std::vector<float>& logits,
                   std::vector<int32_t>& top_ids) = 0;
  bool taps_on_ = false;
  std::vector<std::vector<float>> taps_;
  // Whether this pass taps layer's attention (logits() calls only).
  bool attention_tapped(uint32_t layer) const {
    return attention_on_ && (!attention_layer_ || *attention_layer_ == layer);
  }
  bool attention_on_ = false;
  std::optional<uint32_t> attention_layer_;
  std::vector<std::vector<float>> attention_;        // [layer][H, n, L]
  std::vector<std::vector<float>> cross_attention_;  // [layer][H, n, S]
  std::vector<std::string> warnings_;
  // Adds the warning for `bad` NaN or infinite values of `total` in `tensor` (none if bad == 0);
  // `as` names the precision they were converted to, when that is not the file's own.
  void warn_nonfinite(const Checkpoint& ckpt, const std::string& tensor, uint64_t bad,
                      uint64_t total, const char* as);
  // Throws unless ids are not empty, in the vocabulary, and fit a cache of `context` tokens
  // holding `length`; `whose` names that cache in the message ("the model's", "slot 2's"); and
  // for a decoder with cross-attention, unless `slot` has a source.
  void check(std::span<const int32_t> ids, uint32_t length, uint32_t context,
             const std::string& whose, uint32_t slot = 0) const;
  // Throws unless slot < slots().
  void check_slot(uint32_t slot) const;
  // The rows of hidden, the encoder's output [S, C], checked as set_source() takes them.
  uint32_t source_rows(std::span<const float> hidden) const;
  // Throws unless a slot of `length` tokens can keep n of them (slot_truncate).
  void check_truncate(uint32_t n, uint32_t length) const;

 private:
  uint32_t length_ = 0;
  uint32_t source_length_ = 0;
};

}  // namespace model
