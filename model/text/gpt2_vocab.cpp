#include "model/text/gpt2_vocab.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

#include "model/text/tokenizer.h"
#include "model/text/utf8.h"

namespace model {

namespace {

using json = nlohmann::json;

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves; the other 68 bytes
// take the code points 256.. in byte order, so every byte is one visible character.
struct ByteAlphabet {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 256 + 68> to_byte{};
  ByteAlphabet() {
    to_byte.fill(-1);
    char32_t extra = 256;
    for (int b = 0; b < 256; b++) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t c = printable ? static_cast<char32_t>(b) : extra++;
      to_char[static_cast<size_t>(b)] = c;
      to_byte[c] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet table;
  return table;
}

// A string for an error message: JSON-quoted, control characters escaped, long ones cut.
std::string quote(std::string_view s) {
  constexpr size_t kMax = 60;
  const bool cut = s.size() > kMax;
  const std::string shown = json(std::string(cut ? s.substr(0, kMax) : s))
                                .dump(-1, ' ', false, json::error_handler_t::replace);
  return cut ? shown + "..." : shown;
}

// The raw bytes a vocab.json / merges.txt token stands for; empty with `error` set when a
// character is outside the byte alphabet.
std::string token_to_bytes(std::string_view text, std::string& error) {
  std::string bytes;
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(text, i);
    if (!c.ok) {
      error = "invalid UTF-8 at byte " + std::to_string(i);
      return {};
    }
    if (c.cp >= alphabet().to_byte.size() || alphabet().to_byte[c.cp] < 0) {
      error = code_point_name(c.cp) + " is not a character of GPT-2's byte alphabet";
      return {};
    }
    bytes.push_back(static_cast<char>(static_cast<uint8_t>(alphabet().to_byte[c.cp])));
    i += c.len;
  }
  if (bytes.empty()) error = "empty token";
  return bytes;
}

// The id a vocab.json value holds, checked against [0, n).
int32_t vocab_id(const json& value, size_t n, const std::string& where) {
  if (!value.is_number_integer()) {
    throw std::runtime_error(where + ": id must be an integer, got " + value.dump());
  }
  const bool in_range =
      value.is_number_unsigned()
          ? value.get<uint64_t>() < n
          : value.get<int64_t>() >= 0 && static_cast<uint64_t>(value.get<int64_t>()) < n;
  if (!in_range) {
    throw std::runtime_error(where + ": id " + value.dump() + " is out of range [0, " +
                             std::to_string(n) + ") for a vocabulary of " + std::to_string(n) +
                             " tokens");
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

}  // namespace

char32_t gpt2_byte_char(uint8_t b) {
  return alphabet().to_char[b];
}

Gpt2Vocab parse_gpt2_vocab(std::string_view json_text, const std::string& file) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw std::runtime_error(file + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) {
    throw std::runtime_error(file + ": expected a JSON object of token -> id, got " +
                             std::string(root.type_name()));
  }
  const size_t n = root.size();
  if (n == 0) throw std::runtime_error(file + ": empty vocabulary");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw std::runtime_error(file + ": " + std::to_string(n) + " tokens are too many");
  }
  Gpt2Vocab vocab;
  vocab.tokens.resize(n);
  std::vector<const std::string*> key_of(n, nullptr);  // for naming both sides of a duplicate
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& key = it.key();  // a reference into `root`, which outlives key_of
    const json& value = it.value();
    const std::string where = file + ": " + quote(key);
    // n distinct ids in [0, n) are exactly 0..n-1: checking range and uniqueness makes them dense.
    const int32_t id = vocab_id(value, n, where);
    const auto slot = static_cast<size_t>(id);
    if (key_of[slot]) {
      throw std::runtime_error(where + ": id " + std::to_string(id) + " is also the id of " +
                               quote(*key_of[slot]));
    }
    key_of[slot] = &key;
    std::string error;
    vocab.tokens[slot] = token_to_bytes(key, error);
    if (!error.empty()) throw std::runtime_error(where + ": " + error);
    if (key == "<|endoftext|>") vocab.end_of_text = id;
  }
  vocab.byte_ids.fill(-1);
  for (size_t id = 0; id < n; id++) {
    if (vocab.tokens[id].size() == 1) {
      vocab.byte_ids[static_cast<uint8_t>(vocab.tokens[id][0])] = static_cast<int32_t>(id);
    }
  }
  for (size_t b = 0; b < 256; b++) {
    if (vocab.byte_ids[b] < 0) {
      std::string c;
      append_utf8(c, gpt2_byte_char(static_cast<uint8_t>(b)));
      throw std::runtime_error(file + ": no token for byte " + std::to_string(b) + " (written " +
                               quote(c) + "): byte-level BPE needs all 256");
    }
  }
  return vocab;
}

Bpe parse_gpt2_merges(std::string_view text, const Gpt2Vocab& vocab, const std::string& file,
                      const std::string& vocab_file) {
  if (auto bad = find_invalid_utf8(text)) {
    throw std::runtime_error(file + ": invalid UTF-8 at byte offset " + std::to_string(*bad));
  }
  std::unordered_map<std::string_view, int32_t> id_of;  // token bytes -> id
  id_of.reserve(vocab.tokens.size());
  for (size_t id = 0; id < vocab.tokens.size(); id++) {
    id_of.emplace(vocab.tokens[id], static_cast<int32_t>(id));
  }
  Bpe bpe(vocab.byte_ids);
  std::vector<size_t> line_of_rank;
  size_t line_no = 0, empty_line = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    line_no++;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string where = file + ": line " + std::to_string(line_no);
    if (line_no == 1 && line.starts_with("#version")) continue;
    if (line.empty()) {
      if (!empty_line) empty_line = line_no;
      continue;
    }
    if (empty_line)
      throw std::runtime_error(file + ": line " + std::to_string(empty_line) + ": empty line");
    const size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      throw std::runtime_error(where + ": expected two tokens separated by one space, got " +
                               quote(line));
    }
    int32_t ids[2];
    std::string sides[2];
    for (int k = 0; k < 2; k++) {
      const std::string_view side = k == 0 ? line.substr(0, space) : line.substr(space + 1);
      std::string error;
      sides[k] = token_to_bytes(side, error);
      if (!error.empty()) throw std::runtime_error(where + ": " + quote(side) + ": " + error);
      auto it = id_of.find(sides[k]);
      if (it == id_of.end()) {
        throw std::runtime_error(where + ": " + quote(side) + " is not a token of " + vocab_file);
      }
      ids[k] = it->second;
    }
    auto merged = id_of.find(sides[0] + sides[1]);
    if (merged == id_of.end()) {
      throw std::runtime_error(where + ": the merge of " + quote(line.substr(0, space)) + " and " +
                               quote(line.substr(space + 1)) + " is not a token of " + vocab_file);
    }
    if (!bpe.add_merge(ids[0], ids[1], merged->second)) {
      throw std::runtime_error(where + ": duplicate merge " + quote(line) + " (first on line " +
                               std::to_string(line_of_rank[*bpe.rank(ids[0], ids[1])]) + ")");
    }
    line_of_rank.push_back(line_no);
  }
  return bpe;
}

}  // namespace model
