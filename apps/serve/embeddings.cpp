#include "apps/serve/embeddings.h"

#include <cstring>

namespace app {

using json = nlohmann::json;

namespace {

ApiError bad(const std::string& message) { return ApiError(400, message, "input"); }

// Standard base64 of bytes (RFC 4648, padded): what OpenAI's clients decode.
std::string base64(const std::string& bytes) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const auto byte = [&](size_t k) -> uint32_t {
      return k < bytes.size() ? static_cast<uint8_t>(bytes[k]) : 0u;
    };
    const uint32_t n = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    out += digits[n >> 18 & 63];
    out += digits[n >> 12 & 63];
    out += i + 1 < bytes.size() ? digits[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? digits[n & 63] : '=';
  }
  return out;
}

// One input of ids as given, checked against the vocabulary.
EmbeddingsRequest::Input ids_input(const json& a, const std::string& where, uint32_t V) {
  EmbeddingsRequest::Input in;
  for (const json& id : a) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= V)
      throw bad(where + " holds " + json_type(id) + " " + (id.is_number() ? id.dump() : "") +
                ", not a token id in [0, " + std::to_string(V) + ")");
    in.ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  in.types.assign(in.ids.size(), 0);
  return in;
}

}  // namespace

EmbeddingsRequest parse_embeddings(const std::string& body, const model::WordPiece& wordpiece,
                                   const model::Config& config) {
  const json j = parse_body(body);
  EmbeddingsRequest r;
  if (const auto m = j.find("model"); m != j.end() && !m->is_null() && !m->is_string())
    throw ApiError(400, "model must be a string, got " + json_type(*m), "model");
  if (const auto f = j.find("encoding_format"); f != j.end() && !f->is_null()) {
    if (!f->is_string() || (*f != "float" && *f != "base64"))
      throw ApiError(400, "encoding_format must be \"float\" or \"base64\"", "encoding_format");
    r.base64 = *f == "base64";
  }
  if (const auto d = j.find("dimensions"); d != j.end() && !d->is_null())
    throw ApiError(400, "dimensions is not supported: the model's embeddings have " +
                            std::to_string(config.n_embd),
                   "dimensions");
  const auto input = j.find("input");
  if (input == j.end() || input->is_null()) throw bad("input is required");
  // The inputs as JSON values: one string or one id array, or an array of them.
  std::vector<const json*> items;
  if (input->is_string() || (input->is_array() && !input->empty() && (*input)[0].is_number())) {
    items.push_back(&*input);
  } else if (input->is_array()) {
    for (const json& v : *input) items.push_back(&v);
  } else {
    throw bad("input must be a string, an array of strings, or token ids, got " + json_type(*input));
  }
  if (items.empty()) throw bad("input is an empty array");
  if (items.size() > kMaxEmbeddingInputs)
    throw bad("input holds " + std::to_string(items.size()) + " inputs; at most " +
              std::to_string(kMaxEmbeddingInputs) + " per request");
  for (size_t i = 0; i < items.size(); i++) {
    const json& v = *items[i];
    const std::string where = items.size() == 1 && &v == &*input ? "input" : "input[" + std::to_string(i) + "]";
    EmbeddingsRequest::Input in;
    if (v.is_string()) {
      const std::string& text = v.get_ref<const std::string&>();
      if (text.empty()) throw bad(where + " is an empty string");
      const model::WordPieceEncoding e = wordpiece.encode(text);
      in.ids = e.ids;
      in.types = e.type_ids;
    } else if (v.is_array()) {
      in = ids_input(v, where, config.n_vocab);
      if (in.ids.empty()) throw bad(where + " is an empty array of token ids");
    } else {
      throw bad(where + " must be a string or an array of token ids, got " + json_type(v));
    }
    // OpenAI refuses an input past the model's context rather than cut it.
    if (in.ids.size() > config.n_ctx)
      throw bad(where + " is " + std::to_string(in.ids.size()) +
                " tokens, more than the model's maximum of " + std::to_string(config.n_ctx));
    r.inputs.push_back(std::move(in));
  }
  return r;
}

std::string embeddings_response(const std::vector<std::vector<float>>& embeddings, bool b64,
                                const std::string& model_name, size_t prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < embeddings.size(); i++) {
    const std::vector<float>& e = embeddings[i];
    json value;
    if (b64) {  // float32 little-endian, as OpenAI's clients decode it
      std::string bytes(e.size() * 4, '\0');
      std::memcpy(bytes.data(), e.data(), bytes.size());
      value = base64(bytes);
    } else {
      value = e;
    }
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", value}});
  }
  return json{{"object", "list"},
              {"data", data},
              {"model", model_name},
              {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}}
      .dump();
}

}  // namespace app
