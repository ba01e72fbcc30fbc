// The float64 PyTorch reference of an encoder-decoder's training step
// (tools/reference/seq2seq_ref.py --grads, written from modeling_marian), for the tests that
// hold the CPU step to it: test_train_seq2seq (pairs of one length) and test_train_padding.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/training/parameters.h"

namespace test {

// Whether Debian's torch is there for the reference (/usr/bin/python3); without it a skip with
// a message, or in CI a failure.
bool has_torch();

// One step's batch: B sources [B, S], the decoder's inputs and targets [B, T]; mask the
// sources' attention mask [B, S] (1 real, 0 padding), empty for all ones.
struct ReferenceBatch {
  std::vector<int32_t> sources, inputs, targets, mask;
  uint32_t S = 0, T = 0;
};
struct ReferenceStep {
  double loss = 0;
  model::training::Parameters grads;  // under gpt2vk's canonical names
};
// The reference's loss and gradients for the Marian folder `dir` (its weights as they load).
ReferenceStep seq2seq_reference_step(const std::filesystem::path& dir, const ReferenceBatch& batch);

// Every tensor of `got` within 1e-5 of the reference tensor's largest magnitude: ours is
// double-accumulated with float storage between ops, the reference float64 throughout, its
// gradients stored as float32. The attention key biases have zero gradients in exact arithmetic
// (a query's scores all move by q . b, which the softmax ignores): their scale is floored at 1e-4
// of the step's largest gradient.
void check_reference_grads(const std::string& what, const model::training::Parameters& got,
                           const model::training::Parameters& ref);

}  // namespace test
