// `gpt2vk serve`'s side of OpenAI's embeddings API, for an encoder (BERT) folder: a request body
// checked field by field into the sequences to encode, and the response.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "apps/serve/request.h"
#include "model/formats/config.h"
#include "model/text/wordpiece.h"

namespace app {

struct EmbeddingsRequest {
  struct Input {
    std::vector<int32_t> ids, types;  // what the encoder reads: [CLS] text [SEP], or ids as given
  };
  std::vector<Input> inputs;
  bool base64 = false;  // encoding_format "base64": each embedding as its float32 bytes
};

inline constexpr size_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit per request
// The inputs of the requests in a round (encode_queue.h) go to the encoder this many to a pass
// (Encoder::encode_batch), padded to each pass's longest: the activations of 8 n_ctx-token
// sequences (about 120 MiB for BERT-base).
inline constexpr uint32_t kServeEncoderBatch = 8;

// Parses /v1/embeddings: "input" a string, an array of strings, an array of token ids (one
// sequence, read as the model's input as it is), or an array of such arrays; at most
// kMaxEmbeddingInputs, none empty, each within the model's n_ctx positions. Throws ApiError
// (400) naming the field and the problem.
EmbeddingsRequest parse_embeddings(const std::string& body, const model::WordPiece& wordpiece,
                                   const model::Config& config);

// The response body: OpenAI's list of {"object": "embedding", "index", "embedding"} and usage;
// embeddings [inputs, C].
std::string embeddings_response(const std::vector<std::vector<float>>& embeddings, bool base64,
                                const std::string& model_name, size_t prompt_tokens);

}  // namespace app
