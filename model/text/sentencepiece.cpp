// SentencePiece for T5 and Marian: the folder's files, special tokens cut out of the raw text,
// and the two id spaces (T5: the model's ids then the sentinels; Marian: vocab.json's).
#include "model/text/sentencepiece.h"

#include <sentencepiece_processor.h>

#include <array>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "model/text/utf8.h"

namespace model {

using json = nlohmann::json;

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581: SentencePiece's word boundary

std::string spaces_for_boundaries(std::string_view piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, kSpace.size()) == kSpace) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

std::string extra_id_name(int32_t k) {
  return "<extra_id_" + std::to_string(k) + ">";
}

// A status that is not ok as an exception naming the model file.
void check(const sentencepiece::util::Status& status, const std::string& file) {
  if (!status.ok()) throw std::runtime_error(file + ": SentencePiece: " + status.ToString());
}

bool read_varint(std::string_view bytes, size_t& at, uint64_t& value) {
  value = 0;
  for (unsigned shift = 0; shift < 64 && at < bytes.size(); shift += 7) {
    const auto b = static_cast<uint8_t>(bytes[at++]);
    value |= uint64_t{b & 0x7Fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// What is wrong with a model file's top-level protobuf fields, or "" when nothing is. A file cut
// between two pieces still parses, as a smaller model: protobuf writes fields in number order,
// so what shows the cut is that the trainer and normalizer specs (ModelProto fields 2 and 3,
// after the pieces, field 1) are gone.
std::string top_level_problem(std::string_view bytes) {
  bool seen[4] = {};
  for (size_t at = 0; at < bytes.size();) {
    const size_t start = at;
    uint64_t key = 0, n = 0;
    if (!read_varint(bytes, at, key)) return "a field key at byte offset " + std::to_string(start);
    const uint64_t type = key & 7, field = key >> 3;
    if (type == 0) {
      if (!read_varint(bytes, at, n)) return "a varint at byte offset " + std::to_string(start);
    } else if (type == 1 || type == 5 || type == 2) {
      n = type == 1 ? 8 : 4;
      if (type == 2 && !read_varint(bytes, at, n))
        return "a length at byte offset " + std::to_string(start);
      if (n > bytes.size() - at) {
        return "field " + std::to_string(field) + " at byte offset " + std::to_string(start) +
               " runs past the end";
      }
      at += n;
    } else {
      return "wire type " + std::to_string(type) + " at byte offset " + std::to_string(start);
    }
    if (field >= 1 && field <= 3) seen[field] = true;
  }
  if (!seen[1]) return "no pieces (field 1)";
  if (!seen[2]) return "no trainer_spec (field 2): cut short?";
  if (!seen[3]) return "no normalizer_spec (field 3): cut short?";
  return "";
}

// The processor reads the bytes we read, so that a missing file is reported as for every other
// tokenizer file; a corrupt one by the field walk above or by SentencePiece's parse status (it
// returns one for random bytes and cut files alike, never aborts: tests/test_sentencepiece.cpp).
void load_model(sentencepiece::SentencePieceProcessor& spm, const std::filesystem::path& file) {
  const std::string bytes = read_tokenizer_file(file);
  if (bytes.empty()) throw std::runtime_error(file.string() + ": empty, not a SentencePiece model");
  if (const std::string problem = top_level_problem(bytes); !problem.empty()) {
    throw std::runtime_error(file.string() + ": not a SentencePiece model (" + problem + ")");
  }
  const auto status = spm.LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    throw std::runtime_error(file.string() + ": not a SentencePiece model (" + status.ToString() +
                             ")");
  }
}

}  // namespace

struct SentencePieceTokenizer::State {
  SpmFlavor flavor = SpmFlavor::T5;
  sentencepiece::SentencePieceProcessor spm;
  std::string spm_file;  // names the model in messages
  // T5: ids [0, n_pieces) are the model's, [n_pieces, n_pieces + n_extra) the sentinels.
  int32_t n_pieces = 0, n_extra = 0;
  // Marian: vocab.json both ways; names[id] is the piece.
  std::vector<std::string> names;
  std::unordered_map<std::string, int32_t> ids;
  int32_t eos = 0, unk = 0;
  std::optional<int32_t> pad;
  // Tokens cut out of the raw text whole (the transformers tokenizers' special tokens), and which
  // first bytes can start one, so that most positions are passed over with one lookup.
  std::vector<std::pair<std::string, int32_t>> specials;
  std::array<bool, 256> starts_special{};

  uint32_t size() const {
    return flavor == SpmFlavor::T5 ? static_cast<uint32_t>(n_pieces + n_extra)
                                   : static_cast<uint32_t>(names.size());
  }
  void check_id(int32_t id) const {
    if (id < 0 || static_cast<uint32_t>(id) >= size()) {
      throw std::runtime_error("token id " + std::to_string(id) + " is out of range [0, " +
                               std::to_string(size()) + ")");
    }
  }
  // What decode leaves out: skip_special_tokens's </s>, <pad> and <unk>.
  bool skipped(int32_t id) const { return id == eos || id == unk || (pad && id == *pad); }
  bool sentinel(int32_t id) const { return flavor == SpmFlavor::T5 && id >= n_pieces; }
  std::string name(int32_t id) const {
    if (flavor == SpmFlavor::Marian) return names[static_cast<size_t>(id)];
    if (sentinel(id)) return extra_id_name(n_pieces + n_extra - 1 - id);
    return spm.IdToPiece(id);
  }
  void add_special(std::string text, int32_t id) {
    if (text.empty()) return;
    starts_special[static_cast<uint8_t>(text[0])] = true;
    specials.emplace_back(std::move(text), id);
  }
  int32_t marian_id(const std::string& piece) const {
    const auto it = ids.find(piece);
    return it == ids.end() ? unk : it->second;
  }
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
};

namespace {

struct SpecialMatch {
  size_t at = std::string_view::npos, len = 0;
  int32_t id = 0;
};

// The first special token at or after `from`; the longest where several start there.
SpecialMatch next_special(const SentencePieceTokenizer::State& s, std::string_view text,
                          size_t from) {
  for (size_t i = from; i < text.size(); i++) {
    if (!s.starts_special[static_cast<uint8_t>(text[i])]) continue;
    SpecialMatch best;
    for (const auto& [token, id] : s.specials) {
      if (token.size() > best.len && text.compare(i, token.size(), token) == 0) {
        best = {i, token.size(), id};
      }
    }
    if (best.len > 0) return best;
  }
  return {};
}

}  // namespace

void SentencePieceTokenizer::State::encode_segment(std::string_view text,
                                                   std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (flavor == SpmFlavor::T5) {
    std::vector<int> pieces;
    check(spm.Encode(text, &pieces), spm_file);
    out.insert(out.end(), pieces.begin(), pieces.end());
    return;
  }
  // Marian: a ">>xx<<" target-language code that opens the text is one piece, not split by the
  // model (MarianTokenizer.remove_language_code: through the first "<<").
  if (text.starts_with(">>")) {
    if (const size_t end = text.find("<<"); end != std::string_view::npos) {
      out.push_back(marian_id(std::string(text.substr(0, end + 2))));
      text.remove_prefix(end + 2);
    }
  }
  std::vector<std::string> pieces;
  check(spm.Encode(text, &pieces), spm_file);
  for (const std::string& p : pieces) out.push_back(marian_id(p));
}

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  check_utf8(text);
  std::vector<int32_t> ids;
  for (size_t from = 0;;) {
    const SpecialMatch m = next_special(*state_, text, from);
    state_->encode_segment(text.substr(from, m.at - from), ids);
    if (m.len == 0) break;
    ids.push_back(m.id);
    from = m.at + m.len;
  }
  ids.push_back(state_->eos);
  return ids;
}

std::string SentencePieceTokenizer::token_bytes(int32_t id) const {
  const State& s = *state_;
  s.check_id(id);
  if (s.skipped(id)) return "";
  const std::string name = s.name(id);
  if (s.sentinel(id)) return name;
  // Marian's piece may be one the side's model lacks (a language code): shown as it is.
  const int spm_id = s.spm.PieceToId(name);
  if (s.spm.IdToPiece(spm_id) == name) {
    if (s.spm.IsControl(spm_id) || s.spm.IsUnknown(spm_id)) return "";
    if (s.spm.IsByte(spm_id)) {  // "<0xE2>"
      return std::string(1, static_cast<char>(std::stoi(name.substr(3, 2), nullptr, 16)));
    }
  }
  return spaces_for_boundaries(name);
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  const State& s = *state_;
  std::string out;
  if (s.flavor == SpmFlavor::T5) {
    // Runs of the model's ids are detokenized by the model, which drops the space that opens a
    // run; a run after a sentinel keeps it, as the tokenizers crate's Metaspace decoder does.
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      std::string text;
      check(s.spm.Decode(run, &text), s.spm_file);
      if (!out.empty() && s.spm.IdToPiece(run[0]).starts_with(kSpace)) out += ' ';
      out += text;
      run.clear();
    };
    for (int32_t id : ids) {
      s.check_id(id);
      if (s.skipped(id)) continue;
      if (s.sentinel(id)) {
        flush();
        out += s.name(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return sanitize_utf8(out);
  }
  // Marian: pieces through vocab.json, detokenized together by the side's model; a piece the
  // model lacks comes back with its "▁", which MarianTokenizer turns into spaces, then strips.
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    s.check_id(id);
    if (!s.skipped(id)) pieces.push_back(s.names[static_cast<size_t>(id)]);
  }
  check(s.spm.Decode(pieces, &out), s.spm_file);
  out = spaces_for_boundaries(out);
  const size_t first = out.find_first_not_of(" \t\n\r\f\v");
  if (first == std::string::npos) return "";
  out = out.substr(first, out.find_last_not_of(" \t\n\r\f\v") + 1 - first);
  return sanitize_utf8(out);
}

uint32_t SentencePieceTokenizer::vocab_size() const {
  return state_->size();
}
int32_t SentencePieceTokenizer::eos() const {
  return state_->eos;
}
int32_t SentencePieceTokenizer::unk() const {
  return state_->unk;
}
std::optional<int32_t> SentencePieceTokenizer::pad() const {
  return state_->pad;
}
SpmFlavor SentencePieceTokenizer::flavor() const {
  return state_->flavor;
}
std::string SentencePieceTokenizer::piece(int32_t id) const {
  state_->check_id(id);
  return state_->name(id);
}

namespace {

// tokenizer_config.json's "extra_ids" where the file has one, else transformers' default 100.
int32_t t5_extra_ids(const std::filesystem::path& dir, int32_t n_pieces) {
  const auto file = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(file)) return 100;
  json config;
  try {
    config = json::parse(read_tokenizer_file(file));
  } catch (const json::parse_error& e) {
    throw std::runtime_error(file.string() + ": not JSON (" + e.what() + ")");
  }
  if (!config.is_object() || !config.contains("extra_ids")) return 100;
  const json& n = config["extra_ids"];
  if (!n.is_number_integer() || n.get<int64_t>() < 0 ||
      n.get<int64_t>() > INT32_MAX - int64_t{n_pieces}) {
    throw std::runtime_error(file.string() + ": extra_ids " + n.dump() +
                             " is not a count of sentinel tokens");
  }
  return n.get<int32_t>();
}

void setup_t5(SentencePieceTokenizer::State& s, const std::filesystem::path& dir) {
  s.n_pieces = s.spm.GetPieceSize();
  if (s.spm.eos_id() < 0) {
    throw std::runtime_error(s.spm_file +
                             ": the model has no end-of-sequence piece (eos_id -1); "
                             "T5 ends every text with one");
  }
  s.eos = s.spm.eos_id();
  s.unk = s.spm.unk_id();
  if (s.spm.pad_id() >= 0) s.pad = s.spm.pad_id();
  s.n_extra = t5_extra_ids(dir, s.n_pieces);
  for (int32_t id : {s.eos, s.unk}) s.add_special(s.spm.IdToPiece(id), id);
  if (s.pad) s.add_special(s.spm.IdToPiece(*s.pad), *s.pad);
  for (int32_t k = 0; k < s.n_extra; k++) {
    s.add_special(extra_id_name(k), s.n_pieces + s.n_extra - 1 - k);
  }
}

void setup_marian(SentencePieceTokenizer::State& s, const std::filesystem::path& file) {
  const std::string where = file.string();
  json vocab;
  try {
    vocab = json::parse(read_tokenizer_file(file));
  } catch (const json::parse_error& e) {
    throw std::runtime_error(where + ": not JSON (" + e.what() + ")");
  }
  if (!vocab.is_object()) throw std::runtime_error(where + ": not an object of piece -> id");
  if (vocab.size() > static_cast<size_t>(INT32_MAX))
    throw std::runtime_error(where + ": more pieces than int32 ids can number");
  // Ids number the embedding's rows: each of 0..n-1 once, so that every id decodes.
  const auto n = static_cast<int64_t>(vocab.size());
  s.names.assign(vocab.size(), "");
  std::vector<bool> seen(vocab.size());
  for (const auto& [piece, value] : vocab.items()) {
    if (!value.is_number_integer()) {
      throw std::runtime_error(where + ": \"" + piece + "\" has " + value.dump() +
                               ", not an integer id");
    }
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id >= n) {
      throw std::runtime_error(where + ": \"" + piece + "\" has id " + std::to_string(id) +
                               ", outside [0, " + std::to_string(n) + ") (" + std::to_string(n) +
                               " pieces)");
    }
    const auto at = static_cast<size_t>(id);
    if (seen[at]) {
      throw std::runtime_error(where + ": \"" + piece + "\" has id " + std::to_string(id) +
                               ", as \"" + s.names[at] + "\" does");
    }
    seen[at] = true;
    s.names[at] = piece;
    s.ids.emplace(piece, static_cast<int32_t>(id));
  }
  auto required = [&](const std::string& piece) {
    const auto it = s.ids.find(piece);
    if (it == s.ids.end()) throw std::runtime_error(where + ": no \"" + piece + "\" piece");
    return it->second;
  };
  s.eos = required("</s>");
  s.unk = required("<unk>");
  if (const auto it = s.ids.find("<pad>"); it != s.ids.end()) s.pad = it->second;
  for (const char* token : {"</s>", "<unk>", "<pad>"}) {
    if (const auto it = s.ids.find(token); it != s.ids.end()) s.add_special(token, it->second);
  }
}

}  // namespace

std::unique_ptr<SentencePieceTokenizer> load_sentencepiece(const std::filesystem::path& dir,
                                                           SpmFlavor flavor, SpmSide side) {
  auto s = std::make_unique<SentencePieceTokenizer::State>();
  s->flavor = flavor;
  const std::filesystem::path model = dir / (flavor == SpmFlavor::T5   ? "spiece.model"
                                             : side == SpmSide::Source ? "source.spm"
                                                                       : "target.spm");
  s->spm_file = model.string();
  load_model(s->spm, model);
  if (flavor == SpmFlavor::T5) {
    setup_t5(*s, dir);
  } else {
    setup_marian(*s, dir / "vocab.json");
  }
  return std::make_unique<SentencePieceTokenizer>(std::move(s));
}

}  // namespace model
