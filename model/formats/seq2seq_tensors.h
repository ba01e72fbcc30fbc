// A Hugging Face encoder-decoder file (MarianMTModel, T5ForConditionalGeneration) presented
// under the canonical names and layout of checkpoint.h: the encoder's tensors under "enc.", the
// decoder's as a decoder's, its cross-attention as h.{i}.ln_x and h.{i}.cross.{c_q,c_k,c_v,c_proj},
// Marian's final_logits_bias as head.bias, T5's relative_attention_bias of block 0 as each
// stack's rel_bias and its gated wi_0, wi_1 side by side as c_fc [C, 2F]; nn.Linear weights
// [out, in] become [in, out], and the self-attention's query, key and value are fused into one
// c_attn [C, 3C].
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/formats/config.h"
#include "model/formats/converted_tensors.h"
#include "model/formats/safetensors.h"

namespace model {

// Every tensor expected_tensors(c) names, made from `file`'s (c.family must be
// EncoderDecoder). Position tables (Marian's sinusoids, which the engine computes) and the
// stacks' copies of the shared embedding are skipped without a word.
ConvertedTensors seq2seq_tensors(const SafeTensors& file, const Config& c);

// The tensors a MarianMTModel or T5 file of config c holds, with the names and shapes Hugging Face
// saves: what seq2seq_tensors() reads, for writing random checkpoints.
std::vector<ExpectedTensor> seq2seq_file_tensors(const Config& c);

// The file's tensors of a MarianMTModel folder of config c, seq2seq_file_tensors(c)'s names and
// shapes in its order, made from the canonical fp32 tensors that `canonical` gives by name: what
// seq2seq_tensors() reads back as the same values (training saves them). T5's relative bias
// tables and scaled final norm have no inverse here: throws std::invalid_argument for a T5.
struct FileTensor {
  ExpectedTensor tensor;
  std::vector<float> values;
};
std::vector<FileTensor> seq2seq_file_values(
    const Config& c, const std::function<const std::vector<float>&(const std::string&)>& canonical);

}  // namespace model
