// GpuTrainer's state, shared by its two files: gpu_trainer_state.cpp plans and allocates it
// (the buffers a step touches, the weights' interleaved copies), gpu_trainer.cpp records and
// runs the steps over it.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/forward/packer.h"
#include "model/ops/gpu/add.h"
#include "model/ops/gpu/common.h"
#include "model/ops/gpu/embedding.h"
#include "model/training/gpu_trainer.h"
#include "model/training/pairs.h"
#include "model/training/train_graph.h"
#include "vk/memory.h"
#include "vk/recorder.h"

namespace model::training {

using W = const vk::BufferSpan*;

struct GpuTrainer::Impl {
  Impl(const vk::Device& d, const Parameters& params, uint32_t b, uint32_t t, uint32_t m,
       bool timestamps, Share sh, bool recompute_blocks, uint32_t s);

  // Where the kernel policy keeps weights interleaved (the CPU set), the matrices the linears
  // read get Interleaved copies, repacked on the device when the weights have changed: W for the
  // forward where K is in whole texels, W^T for dx = dout W^T where N is too (GPT-2's head of
  // 50257 outputs has the first only). matmul_interleaved then takes 32 rows of x per workgroup
  // where the [K, N] weights' texel kernel goes 8 rows at a time. A matrix too large for one
  // binding stays as it is (matmul splits it; interleave cannot).
  void plan_packing(const std::map<W, Linear<W>>& linears);
  // Records the repacking of the weights where they changed since the copies were made (the
  // backward's copies only when it runs): an evaluation between steps repacks nothing.
  void repack(bool backward);

  // The tensors of `p` as one stack's weights: a decoder's, or an encoder-decoder's side, named
  // as Checkpoint::side() names them (the encoder's under "enc.", the shared wte both sides').
  ModelWeights<W> map(const Packer& p, Family side) const;
  uint64_t rows(Rows r) const { return uint64_t{B} * (r == Rows::Source ? S : T); }
  const Config& stack_config(Rows r) const {
    return r == Rows::Source ? source_config : target_config;
  }
  // One step's graph into backend b: a decoder's train_step, or an encoder-decoder's
  // seq2seq_train_step (ew, dew its encoder's weights and gradients).
  template <class Backend>
  void record_step(Backend& b, const ModelWeights<W>& w_, const ModelWeights<W>& dw_,
                   const ModelWeights<W>& ew_, const ModelWeights<W>& dew_, Until until) {
    if (seq2seq) {
      seq2seq_train_step(b, source_config, ew_, dew_, target_config, w_, dw_, until);
    } else {
      train_step(b, config, w_, dw_, until, recompute);
    }
  }
  // backward false: the losses only (grad_norm 0); update: the optimizer step after them.
  // source_values: an encoder-decoder's sources, [micro-batches B, S].
  StepResult run(std::span<const int32_t> id_values, std::span<const int32_t> target_values,
                 std::span<const int32_t> source_values, bool backward, const StepSettings* update);
  // Micro-batch i's ids, targets (and sources) to the device.
  void upload_micro(uint32_t i, std::span<const int32_t> id_values,
                    std::span<const int32_t> target_values,
                    std::span<const int32_t> source_values) {
    gpu::upload_ids(device, io_.span(ids[i]), id_values.subspan(size_t{i} * N, N), config.n_vocab);
    gpu::upload_ids(device, io_.span(targets[i]), target_values.subspan(size_t{i} * N, N),
                    config.n_vocab, true);
    if (seq2seq) upload_sources(i, source_values.subspan(size_t{i} * B * S, size_t{B} * S));
  }
  // Micro-batch i's sources [B', S] (B' <= B) and their lengths, their trailing pads left out.
  void upload_sources(uint32_t i, std::span<const int32_t> values) {
    gpu::upload_ids(device, io_.span(sources[i]), values, config.n_vocab);
    const std::vector<uint32_t> lens = source_lengths(values, S, config.pad_token_id);
    vk::upload(device, io_.span(source_lens[i]), lens.data(), lens.size() * sizeof(uint32_t));
  }
  // A step shared by ranks: the rounds of micro-batches, each exchanged and summed; the losses.
  double shared_gradients(std::span<const int32_t> id_values,
                          std::span<const int32_t> target_values,
                          std::span<const int32_t> source_values, uint32_t mean_over);
  // Records micro-batch i's forward and backward, its gradients from zero into the sum (the
  // first) or into micro_ (the others); `sum` adds those to the sum.
  void record_micro(uint32_t i, uint32_t mean_over, bool sum);
  void record_sum() {
    for (size_t t = 0; t < grad_spans.size(); t++)
      gpu::add(ops, rec,
               {.out = grad_spans[t], .a = grad_spans[t], .b = micro_spans[t], .n = counts[t]});
  }
  void record_update(const StepSettings& update);
  std::vector<float> logits_pass(uint32_t n, uint32_t first, uint32_t rows);
  std::vector<float> next_logits(std::span<const int32_t> id_values);
  std::vector<float> target_logits(std::span<const int32_t> source_values,
                                   std::span<const int32_t> input_values);

  const vk::Device& device;
  const gpu::Ops ops;  // the device's pipelines and policy, decided once
  Config config;
  std::vector<ExpectedTensor> expected;
  // An encoder-decoder: its decoder's config (target_config) and its encoder's (source_config),
  // over which its step runs; else the config and an empty one.
  bool seq2seq;
  Config target_config, source_config;
  uint32_t B, T, N;  // a micro-batch's sequences, tokens each, and tokens
  uint32_t S;        // an encoder-decoder's source tokens a sequence, else 0
  uint32_t M;        // micro-batches a step
  Share share;       // the micro-batches this process computes
  bool recompute;    // one block's activations, recomputed in the backward (train_graph.h slot)
  // One span per tensor each, the same plan; micro_ (M > 1 only) a micro-batch's gradients.
  Packer weights_, grads_, micro_, m_, v_;
  std::map<std::string, size_t> handles;
  // Per tensor, in `expected` order: its gradient's span and its elements.
  std::vector<vk::BufferSpan> grad_spans, micro_spans;
  std::vector<uint64_t> counts;
  ModelWeights<W> w, dw, dmicro;
  ModelWeights<W> ew, dew, demicro;  // an encoder-decoder's encoder side
  Packer acts_;
  std::map<std::pair<Rows, Saved>, size_t> saved;
  std::map<std::pair<Rows, Grad>, size_t> grad;
  size_t ln_stats = 0, att_stats = 0, norm_scratch = 0;
  struct Packed {
    Linear<W> linear;
    vk::BufferSpan fwd, bwd;  // W [N, K] and W^T [K, N] as Interleaved
    bool has_bwd = false;
  };
  Packer packed_;
  std::map<W, Packed> packed;  // by the weight's span; empty where weights stay as they are
  bool fwd_current = false, bwd_current = false;  // the copies hold the weights as they are
  // host-written: ids and targets [N] (and sources [B S], their lengths [B]) of each micro-batch
  Packer io_;
  std::vector<size_t> ids, targets, sources, source_lens;
  Packer out_;  // read back: each micro-batch's row losses [N], the gradients' sum of squares
  std::vector<size_t> losses;
  size_t norm_sq = 0;
  vk::Recorder rec;
};

}  // namespace model::training
