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
  // Computes the canonical tensor from the one part, in fp32 (T5's output scale folded into
  // ln_f.weight, its bias table expanded per relative position); the tensor is then fp32
  // whatever the file's dtype, so each value is rounded once, as the forward would round it.
  std::function<std::vector<float>(std::vector<float>)> fp32;
};

// Canonical name -> source, written the ways a file's names map (BERT's, Marian's).
struct TensorSources {
  std::map<std::string, TensorSource> map;
  void vector(const std::string& to, const std::string& from) { map[to] = {{from}, false, {}}; }
  // A vector times a constant.
  void scaled(const std::string& to, const std::string& from, float scale) {
    map[to] = {{from}, false, {}, [scale](std::vector<float> v) {
                 for (float& x : v) x *= scale;
                 return v;
               }};
  }
  // Computed from the file's one tensor of shape `stored`.
  void computed(const std::string& to, const std::string& from, std::vector<uint64_t> stored,
                std::function<std::vector<float>(std::vector<float>)> fp32) {
    map[to] = {{from}, false, std::move(stored), std::move(fp32)};
  }
  // Linear weights without biases (T5): "from" + ".weight" for each part, side by side.
  void weights(const std::string& to, const std::vector<std::string>& from) {
    std::vector<std::string> parts;
    for (const std::string& f : from) parts.push_back(f + ".weight");
    map[to + ".weight"] = {parts, true, {}};
  }
  // An nn.Linear "from" (.weight transposed, .bias as stored) as the canonical linear "to".
  void linear(const std::string& to, const std::string& from) {
    map[to + ".weight"] = {{from + ".weight"}, true, {}};
    vector(to + ".bias", from + ".bias");
  }
  void norm(const std::string& to, const std::string& from) {
    vector(to + ".weight", from + ".weight");
    vector(to + ".bias", from + ".bias");
  }
  // Query, key and value linears side by side as one c_attn [C, 3C] (and its bias [3C]).
  void fused_qkv(const std::string& to, const std::string& q, const std::string& k,
                 const std::string& v) {
    map[to + ".weight"] = {{q + ".weight", k + ".weight", v + ".weight"}, true, {}};
    map[to + ".bias"] = {{q + ".bias", k + ".bias", v + ".bias"}, false, {}};
  }
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

// The inverse of convert_tensors for one canonical tensor e: its fp32 values as the file's parts,
// in src.parts' order, each of part_shape(e, src). A computed source (src.fp32) has no inverse:
// throws std::invalid_argument naming it.
std::vector<std::vector<float>> file_parts(const ExpectedTensor& e, const TensorSource& src,
                                           const std::vector<float>& values);

}  // namespace model
