// A training step on a Vulkan device: train_graph.h recorded through the model::gpu ops, then
// the gradients' global norm and the optimizer update, all in one command buffer with one
// submission and one wait; the host reads back the losses and the norm. Weights, gradients and
// AdamW's moments stay on the device in fp32 between steps.
#pragma once
#include <cstdint>
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

struct StepResult {
  double loss = 0;       // the mean cross-entropy over the step's B * T targets
  double grad_norm = 0;  // the global L2 norm of the gradients, before clipping
};

class GpuTrainer {
 public:
  // The parameters go to the device; AdamW's moments start at zero. B sequences of T tokens
  // per step, T <= n_ctx. Throws vk::Error when an op cannot run on the device. timestamps:
  // time every dispatch (timings()).
  GpuTrainer(const vk::Device& device, const Parameters& params, uint32_t B, uint32_t T,
             bool timestamps = false);
  ~GpuTrainer();
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;

  // Forward and backward of ids [B, T] against targets [B, T]: the gradients, no update.
  StepResult gradients(std::span<const int32_t> ids, std::span<const int32_t> targets);
  // The forward pass alone: the mean loss of ids [B, T] against targets [B, T] (evaluation).
  double evaluate(std::span<const int32_t> ids, std::span<const int32_t> targets);
  // A whole step: forward, backward, the global norm, clipping and the update.
  StepResult step(std::span<const int32_t> ids, std::span<const int32_t> targets,
                  const StepSettings& settings);
  // The forward pass of one sequence alone, ids [n] with 1 <= n <= T, as a pass of B = 1 and
  // T = n: the logits of its last position [V], what the weights predict next (a sample between
  // steps). It changes nothing a step reads: the weights, gradients and moments stay, and the
  // activations it writes are written again by the next pass.
  std::vector<float> next_logits(std::span<const int32_t> ids);

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

  uint32_t batch() const;
  uint32_t context() const;

  struct Impl;  // gpu_trainer.cpp's: the device buffers and the recorder

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace model::training
