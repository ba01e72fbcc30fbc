// What `gpt2vk attention` makes of the softmax weights it taps: tokens made readable, a one-line
// summary of each head, the terminal view, the JSON file and the self-contained HTML page.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace app {

// The weights of the heads asked for, over one prompt of T tokens: each query over the same T
// tokens, or (cross-attention: an encoder-decoder's target over its source) over K others.
struct AttentionMap {
  std::string title, model, device, precision;
  uint32_t n_layer = 0, n_head = 0;  // the model's
  bool causal = true;
  std::vector<uint32_t> layers, heads;  // the layers and heads present, ascending
  std::vector<int32_t> ids;             // [T] the queries'
  std::vector<std::string> tokens;      // [T] display text (display_token)
  // [K] the keys' where they are other tokens than the queries (never causal); else empty
  std::vector<int32_t> key_ids;
  std::vector<std::string> key_tokens;
  std::vector<float> probs;  // [layers][heads][T query][K key]

  uint32_t T() const { return static_cast<uint32_t>(ids.size()); }
  uint32_t K() const { return key_ids.empty() ? T() : static_cast<uint32_t>(key_ids.size()); }
  // Head `h` of layer `l`, as indices into layers and heads: [T, K].
  const float* head(size_t l, size_t h) const {
    return probs.data() + (l * heads.size() + h) * size_t{T()} * K();
  }
};

// A token's bytes as one line of text: whitespace made visible (space ␣, newline ↵, tab →,
// other control characters as their Unicode pictures), bytes that are not whole UTF-8
// characters (a GPT-2 token may end inside one) as \xNN.
std::string display_token(std::string_view bytes);

// What one head attends to most, e.g. "previous token 0.82" or "itself 0.50, previous token
// 0.50": the mean weight, over the queries where it exists, on the first token, the previous
// token, the query itself, the next token (bidirectional) and other copies of the query's token;
// those of at least 0.3, the largest two. Otherwise, where each query's largest weight is 0.5
// or more on average, the token its largest weight falls on most often ("focused 0.91, mostly
// on ␣"); else how spread out the weights are ("spread out, entropy 2.3 bits").
//   probs [T, T], ids [T], tokens [T] (display_token)
std::string summarize_head(const float* probs, std::span<const int32_t> ids,
                           std::span<const std::string> tokens, bool causal);
// A head over other tokens (cross-attention): where each query's largest weight is 0.5 or more
// on average, the key token it falls on most often, else how spread out the weights are.
//   probs [T, K], keys [K] (display_token)
std::string summarize_cross(const float* probs, size_t T, std::span<const std::string> keys);

// One head in the terminal: a row per query, a column per key, each weight a shade.
std::string text_view(const AttentionMap& map, size_t layer, size_t head);

// The weights and the tokens for other tools: {"tokens", "ids", "layers", "heads", "summary",
// "attention": [layer][head][query][key], ...}, and "K", "key_tokens", "key_ids" where the keys
// are other tokens.
std::string to_json(const AttentionMap& map);

// The page: apps/attention_page.html with the map filled in (weights as fp16, base64).
std::string html_page(const AttentionMap& map);

}  // namespace app
