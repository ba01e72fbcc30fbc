// A training step on a Vulkan device: train_graph.h recorded through the model::gpu ops once per
// micro-batch, then the gradients' global norm and the optimizer update, all in one command
// buffer with one submission and one wait; the host reads back the losses and the norm.
// Weights, gradients and AdamW's moments stay on the device in fp32 between steps.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/training/parameters.h"
#include "vk/context.h"
#include "vk/recorder.h"

namespace model::training {

// An optimizer step's settings (the training contract of issue 17).
struct StepSettings {
  bool sgd = false;  // plain SGD (with the same decoupled decay) instead of AdamW
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to tensors of two or more dimensions only
  float clip = 1.0f;          // the gradients' global norm bound; 0: no clipping
  uint64_t step = 1;          // counts from 1 (AdamW's bias corrections)
};

// A step shared by a group of processes, one replica of the weights each (data parallelism:
// apps/train.cpp over MPI). Of a step's M micro-batches this process computes those m with
// m % ranks == rank, a round of `ranks` at a time; each round's gradients (and row losses) go to
// every rank through `allgather`, and every rank adds them into its sum in micro-batch order,
// so the sum, the norm and the update are those of one process with the same M, to the bit.
struct Share {
  uint32_t rank = 0, ranks = 1;
  // Every rank's `mine` (of one length on all) into `all`, in rank order: MPI_Allgather.
  std::function<void(std::span<const float> mine, std::span<float> all)> allgather;
};

struct StepResult {
  double loss = 0;       // the mean cross-entropy over the step's targets (padding left out)
  double grad_norm = 0;  // the global L2 norm of the gradients, before clipping
};

class GpuTrainer {
 public:
  // The parameters go to the device; AdamW's moments start at zero. A step is M micro-batches
  // (gradient accumulation) of B sequences of T tokens, T <= n_ctx: each micro-batch's forward
  // and backward in turn over the same activations, each micro-batch's gradients computed from
  // zero (the first into the sum, the others into a second set of gradients, added to the sum
  // in micro-batch order: sum = ((g0 + g1) + g2) ...), each scaled so the sum is that of the mean
  // loss over all M * B * T targets (those that are not padding); the activations are those of B x
  // T whatever M is, the ids, targets and losses (12 bytes a token) those of the M * B * T. Throws
  // vk::Error when an op cannot run on the device, or an id or a target is outside the vocabulary
  // (upload_ids). timestamps: time every dispatch (timings()). share: the part of each step this
  // process computes, M a multiple of its ranks. recompute: keep each block's input only and one
  // block's activations, run each block's forward again before its backward (train_graph.h); the
  // gradients, losses and weights are the same bits as without. An encoder-decoder's parameters
  // train with S >= 1, each sequence a source of S tokens and a target of T (the decoder's inputs,
  // and their next tokens as targets): its calls take the sources [M * B, S] (an evaluation's [B,
  // S]) beside the ids and targets; a decoder's S is 0. An encoder-decoder has no recomputation,
  // and target_logits for next_logits. Padding: a target of ignore_target (model/ops/types.h,
  // transformers' -100) is none, and the mean is over the others (a step or evaluation needs one at
  // least); a source's trailing pad_token_id ids are padding that no query attends to (its
  // attention mask: a batch of sources of different lengths padded to S). The decoder's inputs past
  // a target's end may be anything: its attention is causal, and their targets are ignore_target.
  GpuTrainer(const vk::Device& device, const Parameters& params, uint32_t B, uint32_t T,
             bool timestamps = false, uint32_t M = 1, Share share = {}, bool recompute = false,
             uint32_t S = 0);
  ~GpuTrainer();
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;

  // Forward and backward of ids [M * B, T] against targets [M * B, T], micro-batch m the rows
  // [m B, m B + B): the gradients of the mean loss over them all, no update.
  StepResult gradients(std::span<const int32_t> ids, std::span<const int32_t> targets,
                       std::span<const int32_t> sources = {});
  // The forward pass alone: the mean loss of ids [B, T] against targets [B, T] (evaluation; one
  // micro-batch).
  double evaluate(std::span<const int32_t> ids, std::span<const int32_t> targets,
                  std::span<const int32_t> sources = {});
  // A whole step over ids and targets [M * B, T]: the micro-batches' forwards and backwards,
  // the global norm, clipping and the update.
  StepResult step(std::span<const int32_t> ids, std::span<const int32_t> targets,
                  const StepSettings& settings, std::span<const int32_t> sources = {});
  // The forward pass of one sequence alone, ids [n] with 1 <= n <= T, as a pass of B = 1 and
  // T = n: the logits of its last position [V], what the weights predict next (a sample between
  // steps). It changes nothing a step reads: the weights, gradients and moments stay, and the
  // activations it writes are written again by the next pass.
  std::vector<float> next_logits(std::span<const int32_t> ids);
  // An encoder-decoder's: the forward pass of one pair alone, a source of S ids and the
  // decoder's T inputs, as a pass of B = 1; the logits of every target position [T, V] (the
  // decoder is causal: position t's depend on inputs 0..t only, so a greedy sample reads t and
  // leaves the rest as anything). Changes nothing a step reads, as next_logits.
  std::vector<float> target_logits(std::span<const int32_t> source,
                                   std::span<const int32_t> inputs);

  // Copies of what the device holds: the weights, the last step's gradients, the moments.
  void download(Parameters& params) const;
  void download_grads(Parameters& grads) const;
  void download_moments(Parameters& m, Parameters& v) const;
  void upload_moments(const Parameters& m, const Parameters& v);
  // Replaces the weights (of the same config): a directional check evaluates the loss around
  // them; the moments stay.
  void upload(const Parameters& params);

  // GPU time of each dispatch of the last step (empty without timestamps).
  std::vector<vk::DispatchTime> timings() const;
  // The dispatches of the last step: more than timings() has where the recorder's timestamps ran
  // out.
  uint64_t dispatches() const;

  // The bytes the trainer holds on the device, by what they are for: all allocated when it is
  // made and held until it goes, so they are its peak too.
  struct Memory {
    // gradients: the sum, and with M > 1 a micro-batch's own; moments: AdamW's m and v together
    uint64_t weights = 0, gradients = 0, moments = 0;
    uint64_t activations = 0;  // what the forward keeps for the backward, the backward's scratch
    uint64_t packed = 0;       // the CPU kernel set's interleaved copies of the weights
    uint64_t io = 0;           // each micro-batch's ids, targets and losses; the norm
    uint64_t total() const { return weights + gradients + moments + activations + packed + io; }
  };
  Memory memory() const;

  uint32_t batch() const;          // B, a micro-batch's sequences
  uint32_t context() const;        // T
  uint32_t source_length() const;  // S: an encoder-decoder's sources, else 0
  uint32_t micro_batches() const;  // M
  bool recomputes() const;         // recompute

  struct Impl;  // gpu_trainer_impl.h: the device buffers and the recorder

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace model::training
