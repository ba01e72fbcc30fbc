// WordPiece encoding (special tokens, words, greedy longest-first pieces, the [CLS]/[SEP]
// template, truncation) and loading it from a Hugging Face model folder.
#include "model/text/wordpiece.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "model/text/tokenizer.h"
#include "model/text/utf8.h"

namespace model {

using json = nlohmann::json;

namespace {

std::u32string to_utf32(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8(text, i);
    out.push_back(c.cp);
    i += c.len;
  }
  return out;
}

}  // namespace

WordPiece::WordPiece(std::vector<std::string> vocab, WordPieceOptions options,
                     const std::string& where)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  if (vocab_.size() > static_cast<size_t>(INT32_MAX))
    throw std::runtime_error(where + ": more tokens than int32 ids can number");
  ids_.reserve(vocab_.size());
  for (size_t i = 0; i < vocab_.size(); i++) ids_[vocab_[i]] = static_cast<int32_t>(i);
  auto required = [&](const std::string& name, const char* key) {
    const auto id = find(name);
    if (!id) {
      throw std::runtime_error(where + ": the vocabulary has no " + key + " \"" + name + "\"");
    }
    return *id;
  };
  unk_ = required(options_.unk, "unk_token");
  cls_ = required(options_.cls, "cls_token");
  sep_ = required(options_.sep, "sep_token");
  std::vector<std::string> whole = options_.never_split;
  for (const std::string* s :
       {&options_.unk, &options_.cls, &options_.sep, &options_.pad, &options_.mask}) {
    whole.push_back(*s);
  }
  for (const std::string& t : whole) {
    const auto id = find(t);
    const bool seen = std::any_of(whole_.begin(), whole_.end(),
                                  [&](const auto& w) { return w.first == t; });
    if (!t.empty() && id && !seen) whole_.emplace_back(t, *id);
  }
}

const std::string& WordPiece::token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_.size()) {
    throw std::runtime_error("token id " + std::to_string(id) + " is out of range [0, " +
                             std::to_string(vocab_.size()) + ")");
  }
  return vocab_[static_cast<size_t>(id)];
}

std::optional<int32_t> WordPiece::find(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

// Greedy longest match from the left: the longest prefix in the vocabulary, then the longest
// "##" + continuation, and so on; one piece that matches nothing makes the whole word [UNK].
void WordPiece::add_word(std::vector<int32_t>& ids, std::u32string_view word) const {
  if (word.size() > options_.max_input_chars_per_word) {
    ids.push_back(unk_);
    return;
  }
  std::string utf8;
  std::vector<size_t> at;  // [chars + 1] byte offset of each character in utf8
  for (char32_t c : word) {
    at.push_back(utf8.size());
    append_utf8(utf8, c);
  }
  at.push_back(utf8.size());
  const size_t first = ids.size();
  std::string piece;
  for (size_t start = 0; start < word.size();) {
    std::optional<int32_t> found;
    size_t end = word.size();
    for (; end > start; end--) {
      piece = start > 0 ? options_.prefix : std::string();
      piece.append(utf8, at[start], at[end] - at[start]);
      if ((found = find(piece))) break;
    }
    if (!found) {
      ids.resize(first);
      ids.push_back(unk_);
      return;
    }
    ids.push_back(*found);
    start = end;
  }
}

// Text between special tokens: normalised, split into words, each word into pieces.
void WordPiece::add_segment(std::vector<int32_t>& ids, std::string_view text,
                            std::vector<size_t>* word_ends) const {
  if (text.empty()) return;
  const std::u32string normalized = bert_normalize(to_utf32(text), options_.normalizer);
  for (const std::u32string& word : bert_pre_tokenize(normalized)) {
    add_word(ids, word);
    if (word_ends) word_ends->push_back(ids.size());
  }
}

std::vector<int32_t> WordPiece::tokenize(std::string_view text) const {
  return tokenize(text, nullptr);
}

std::vector<int32_t> WordPiece::tokenize(std::string_view text,
                                         std::vector<size_t>* word_ends) const {
  check_utf8(text);
  std::vector<int32_t> ids;
  size_t from = 0;  // start of the text not yet tokenized
  for (size_t i = 0; i < text.size(); i++) {
    const std::pair<std::string, int32_t>* best = nullptr;
    for (const auto& w : whole_) {
      if (text.substr(i).starts_with(w.first) && (!best || w.first.size() > best->first.size()))
        best = &w;
    }
    if (!best) continue;
    add_segment(ids, text.substr(from, i - from), word_ends);
    ids.push_back(best->second);
    from = i + best->first.size();
    i = from - 1;
  }
  add_segment(ids, text.substr(from), word_ends);
  return ids;
}

namespace {

// The tokens the crate has seen of a text when it stops at the first word that brings the count
// to max_length: word_ends[i] is the count after word i.
size_t seen_length(const std::vector<size_t>& word_ends, size_t total, size_t max_length) {
  for (size_t end : word_ends) {
    if (end >= max_length) return end;
  }
  return total;
}

}  // namespace

WordPieceEncoding WordPiece::encode(std::string_view a, size_t max_length) const {
  std::vector<int32_t> ids = tokenize(a);
  WordPieceEncoding e;
  if (max_length > 0) {
    if (max_length < 2)
      throw std::invalid_argument("max_length " + std::to_string(max_length) +
                                  " cannot hold [CLS] and [SEP]");
    if (ids.size() > max_length - 2) {
      e.truncated = ids.size() - (max_length - 2);
      ids.resize(max_length - 2);
    }
  }
  e.ids.push_back(cls_);
  e.ids.insert(e.ids.end(), ids.begin(), ids.end());
  e.ids.push_back(sep_);
  e.type_ids.assign(e.ids.size(), 0);
  return e;
}

WordPieceEncoding WordPiece::encode(std::string_view a, std::string_view b,
                                    size_t max_length) const {
  std::vector<size_t> ends_a, ends_b;  // ids.size() after each word
  std::vector<int32_t> ia = tokenize(a, &ends_a), ib = tokenize(b, &ends_b);
  WordPieceEncoding e;
  if (max_length > 0) {
    if (max_length < 3)
      throw std::invalid_argument("max_length " + std::to_string(max_length) +
                                  " cannot hold [CLS] and two [SEP]");
    const size_t room = max_length - 3, total = ia.size() + ib.size();
    if (total > room) {
      // The crate tokenizes each text a word at a time only until it holds max_length tokens,
      // checking after words but not after special tokens, and compares those counts, not the
      // whole texts' (seen with tokenizers 0.23.2: "a a a a a a a a a a" against "xyz xyz xyz"
      // at max_length 6 keeps 1 and 2 tokens, not 2 and 1).
      const size_t la = seen_length(ends_a, ia.size(), max_length);
      const size_t lb = seen_length(ends_b, ib.size(), max_length);
      // Its longest-first: n1 for the shorter text, n2 for the longer (B on a tie).
      size_t n1 = std::min(la, lb);
      size_t n2 = n1 > room ? n1 : std::max(n1, room - n1);
      if (n1 + n2 > room) {
        n1 = room / 2;
        n2 = n1 + room % 2;
      }
      if (la > lb) std::swap(n1, n2);
      ia.resize(std::min(ia.size(), n1));
      ib.resize(std::min(ib.size(), n2));
      e.truncated = total - ia.size() - ib.size();
    }
  }
  e.ids.push_back(cls_);
  e.ids.insert(e.ids.end(), ia.begin(), ia.end());
  e.ids.push_back(sep_);
  e.type_ids.assign(e.ids.size(), 0);
  e.ids.insert(e.ids.end(), ib.begin(), ib.end());
  e.ids.push_back(sep_);
  e.type_ids.resize(e.ids.size(), 1);
  return e;
}

namespace {

json read_json(const std::filesystem::path& file) {
  try {
    return json::parse(read_tokenizer_file(file));
  } catch (const json::exception& e) {
    throw std::runtime_error(file.string() + ": invalid JSON: " + e.what());
  }
}

// vocab.txt: one token a line, the id its line number; "\r\n" endings allowed, nothing else
// trimmed (a token may end in a space).
std::vector<std::string> read_vocab_txt(const std::filesystem::path& file) {
  const std::string text = read_tokenizer_file(file);
  if (const auto bad = find_invalid_utf8(text)) {
    throw std::runtime_error(file.string() + ": invalid UTF-8 at byte offset " +
                             std::to_string(*bad));
  }
  std::vector<std::string> vocab;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    if (line.ends_with('\r')) line.remove_suffix(1);
    vocab.emplace_back(line);
    at = end + 1;
  }
  if (vocab.empty()) throw std::runtime_error(file.string() + ": no tokens");
  return vocab;
}

// A special token in tokenizer_config.json: a string, or an AddedToken object {"content": ...}.
void read_token(const json& config, const char* key, std::string& out) {
  if (!config.contains(key) || config[key].is_null()) return;
  const json& v = config[key];
  out = v.is_object() ? v.at("content").get<std::string>() : v.get<std::string>();
}

void read_config(const json& c, WordPieceOptions& o) {
  if (c.contains("do_lower_case")) o.normalizer.lowercase = c["do_lower_case"].get<bool>();
  if (c.contains("strip_accents") && !c["strip_accents"].is_null())
    o.normalizer.strip_accents = c["strip_accents"].get<bool>();
  if (c.contains("tokenize_chinese_chars"))
    o.normalizer.handle_chinese_chars = c["tokenize_chinese_chars"].get<bool>();
  read_token(c, "unk_token", o.unk);
  read_token(c, "cls_token", o.cls);
  read_token(c, "sep_token", o.sep);
  read_token(c, "pad_token", o.pad);
  read_token(c, "mask_token", o.mask);
  if (c.contains("never_split") && !c["never_split"].is_null()) {
    for (const json& t : c["never_split"]) o.never_split.push_back(t.get<std::string>());
  }
  // Tokens added to the tokenizer (transformers writes them here by id).
  if (c.contains("added_tokens_decoder")) {
    for (const auto& [id, t] : c["added_tokens_decoder"].items())
      o.never_split.push_back(t.at("content").get<std::string>());
  }
}

// tokenizer.json with a WordPiece model: the vocabulary {token: id} (ids 0..n-1, each once), the
// model's settings and the BertNormalizer's.
std::vector<std::string> read_tokenizer_json(const json& t, WordPieceOptions& o,
                                             const std::string& file) {
  const json& m = t.at("model");
  if (m.value("type", "") != "WordPiece") {
    throw std::runtime_error(file + ": model type \"" + m.value("type", "") +
                             "\" is not WordPiece");
  }
  const json& v = m.at("vocab");
  std::vector<std::string> vocab(v.size());
  std::vector<bool> seen(v.size());
  for (const auto& [token, id_json] : v.items()) {
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || static_cast<size_t>(id) >= vocab.size() || seen[static_cast<size_t>(id)]) {
      throw std::runtime_error(file + ": model.vocab: \"" + token + "\" has id " +
                               std::to_string(id) + ", not a free id below " +
                               std::to_string(vocab.size()));
    }
    vocab[static_cast<size_t>(id)] = token;
    seen[static_cast<size_t>(id)] = true;
  }
  if (vocab.empty()) throw std::runtime_error(file + ": model.vocab is empty");
  read_token(m, "unk_token", o.unk);
  if (m.contains("continuing_subword_prefix"))
    o.prefix = m["continuing_subword_prefix"].get<std::string>();
  if (m.contains("max_input_chars_per_word"))
    o.max_input_chars_per_word = m["max_input_chars_per_word"].get<size_t>();
  const json& n = t.at("normalizer");
  if (n.is_null() || n.value("type", "") != "BertNormalizer")
    throw std::runtime_error(file + ": normalizer " + n.dump() + " is not BertNormalizer");
  BertNormalizerOptions& b = o.normalizer;
  b.clean_text = n.value("clean_text", true);
  b.handle_chinese_chars = n.value("handle_chinese_chars", true);
  b.lowercase = n.value("lowercase", true);
  b.strip_accents.reset();
  if (n.contains("strip_accents") && !n["strip_accents"].is_null())
    b.strip_accents = n["strip_accents"].get<bool>();
  const json& p = t.at("pre_tokenizer");
  if (p.is_null() || p.value("type", "") != "BertPreTokenizer")
    throw std::runtime_error(file + ": pre_tokenizer " + p.dump() + " is not BertPreTokenizer");
  for (const json& a : t.value("added_tokens", json::array()))
    o.never_split.push_back(a.at("content").get<std::string>());
  return vocab;
}

}  // namespace

std::unique_ptr<WordPiece> load_wordpiece(const std::filesystem::path& dir) {
  const std::filesystem::path txt = dir / "vocab.txt", tj = dir / "tokenizer.json",
                              cfg = dir / "tokenizer_config.json";
  const bool has_txt = std::filesystem::exists(txt);
  if (!has_txt && !std::filesystem::exists(tj))
    throw std::runtime_error(dir.string() + ": no vocab.txt, nor tokenizer.json");
  WordPieceOptions o;
  std::string file;
  try {
    file = cfg.string();
    if (std::filesystem::exists(cfg)) read_config(read_json(cfg), o);
    file = has_txt ? txt.string() : tj.string();
    std::vector<std::string> vocab =
        has_txt ? read_vocab_txt(txt) : read_tokenizer_json(read_json(tj), o, file);
    return std::make_unique<WordPiece>(std::move(vocab), std::move(o), file);
  } catch (const json::exception& e) {
    throw std::runtime_error(file + ": " + e.what());
  }
}

}  // namespace model
