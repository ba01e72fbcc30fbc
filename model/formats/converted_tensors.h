// A file whose tensors are stored under another library's names and layout (BERT, Marian),
// presented as the canonical tensors of checkpoint.h: each canonical tensor is one or more of
// the file's, transposed where they are nn.Linear weights [out, in] and laid side by side along
// the output dimension (query, key and value into one c_attn).
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/formats/safetensors.h"

namespace model {

// Where a canonical tensor comes from.
struct TensorSource {
  std::vector<std::string> parts;  // the file's names, side by side in this order
  bool linear = false;             // nn.Linear weights: each part [N / parts, K], transposed
  // The one part's shape in the file where it differs from the canonical one only by unit
  // dimensions (Marian's final_logits_bias [1, V] for [V]); empty: as part_shape() says.
  std::vector<uint64_t> stored_shape;
};

struct ConvertedTensors {
  // Canonical name -> the tensor: a view into the file where it is stored as used (embeddings,
  // LayerNorm parameters, biases), else into `storage`.
  std::map<std::string, TensorView, std::less<>> views;
  std::vector<std::vector<std::byte>> storage;  // the transposed and fused tensors' bytes
  std::vector<std::string> problems;  // missing or misshapen tensors, in the file's own names
  std::vector<std::string> unused;    // the file's tensors this config does not read
};

// The file's tensors by the names the sources use, and those of a dtype this engine does not
// read (name -> dtype).
using PresentTensors = std::map<std::string, const TensorView*, std::less<>>;
using OtherTensors = std::map<std::string, std::string, std::less<>>;

// Makes every tensor of `expected` from its source into out.views, the problems into
// out.problems; returns the file names it read.
std::set<std::string, std::less<>> convert_tensors(const PresentTensors& present,
                                                   const OtherTensors& other,
                                                   const std::vector<ExpectedTensor>& expected,
                                                   const std::map<std::string, TensorSource>& from,
                                                   ConvertedTensors& out);

// A part's shape in the file: [N / parts, K] for a linear layer's canonical [K, N], else the
// canonical shape split along its one dimension (or the source's stored_shape).
std::vector<uint64_t> part_shape(const ExpectedTensor& e, const TensorSource& src);

}  // namespace model
