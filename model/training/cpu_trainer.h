// The CPU reference of a training step: train_graph.h over the model::cpu ops (double
// accumulation), the proof the GPU trainer is held to.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/training/parameters.h"

namespace model::training {

// Forward and backward of one step of B sequences of T tokens: ids [B, T] and their targets
// [B, T] (each the next token). grads is zeroed, then holds d(mean loss)/d(each parameter).
// Returns the mean cross-entropy over the B * T targets (those that are not ignore_target, of
// which there must be one). recompute: with train_graph.h's
// recomputation (one block's activations, each block's forward run again in the backward).
double cpu_train_step(Parameters& params, Parameters& grads, std::span<const int32_t> ids,
                      std::span<const int32_t> targets, uint32_t B, uint32_t T,
                      bool recompute = false);

// An encoder-decoder's step (train_graph.h's seq2seq_train_step): B sources [B, S], the
// decoder's inputs [B, T] (each target sequence from decoder_start_token_id) and their targets
// [B, T] (the next tokens). grads is zeroed, then holds d(mean loss)/d(each parameter); returns
// the mean cross-entropy over the targets. Padding as GpuTrainer's: targets of ignore_target
// are none, a source's trailing pad_token_id ids are masked from every query.
double cpu_seq2seq_train_step(Parameters& params, Parameters& grads,
                              std::span<const int32_t> sources, std::span<const int32_t> inputs,
                              std::span<const int32_t> targets, uint32_t B, uint32_t S, uint32_t T);

// The forward pass of one sequence ids [n] alone (1 <= n <= n_ctx), up to the logits: those of
// its last position [V] (what GpuTrainer::next_logits computes).
std::vector<float> cpu_next_logits(Parameters& params, std::span<const int32_t> ids);

}  // namespace model::training
