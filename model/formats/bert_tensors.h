// A Hugging Face BERT file (BertModel, as sentence-transformers saves it, or BertForMaskedLM /
// ForSequenceClassification / ForTokenClassification with their "bert." body) presented under
// the canonical names and layout of checkpoint.h, so every backend reads an encoder as it reads
// GPT-2: nn.Linear weights [out, in] become Conv1D's [in, out], and query, key and value are
// fused into one c_attn [C, 3C] (their biases into [3C]).
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "model/formats/checkpoint.h"
#include "model/formats/config.h"
#include "model/formats/converted_tensors.h"
#include "model/formats/safetensors.h"

namespace model {

// Every tensor expected_tensors(c) names, made from `file`'s (c.family must be Encoder). Old
// names (LayerNorm.gamma / .beta) are read too; the position_ids buffer and a pooler the head
// does not use are skipped without a word.
ConvertedTensors bert_tensors(const SafeTensors& file, const Config& c);

// The tensors a BERT file of config c holds, with their names and shapes as Hugging Face saves
// them (the body as "bert.*" under a head, unprefixed for the bare BertModel): what
// bert_tensors() reads, for writing random checkpoints.
std::vector<ExpectedTensor> bert_file_tensors(const Config& c);

}  // namespace model
