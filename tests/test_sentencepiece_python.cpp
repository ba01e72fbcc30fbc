// SentencePiece against Google's Python library (Debian's python3-sentencepiece, run by
// tools/reference/spm_ref.py at test time) on tests/data/spm: over the 1.4 MB many-script corpus,
// line by line, for the unigram and the BPE model, T5's ids, decode and the streamed token bytes
// must equal the library's; a Marian folder over the same models maps the library's pieces
// through vocab.json. None may differ.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/text/sentencepiece.h"
#include "tests/ci.h"
#include "tests/files.h"
#include "tests/process.h"

using model::SpmFlavor;
using model::SpmSide;
using nlohmann::json;

namespace {

// Debian's python3 with its sentencepiece module (setup.sh --tests); in CI its absence fails.
bool have_reference() {
  const bool there = test::run({"/usr/bin/python3", "-c", "import sentencepiece"}).exit_code == 0;
  if (!there) {
    if (test::in_ci())
      FAIL_CHECK("/usr/bin/python3 has no sentencepiece: run scripts/setup.sh --tests");
    else
      MESSAGE("SKIPPED: /usr/bin/python3 has no sentencepiece (scripts/setup.sh --tests)");
  }
  return there;
}

const json& expected() {
  static const json e = [] {
    test::TempDir out;
    const test::CliResult r =
        test::run({"/usr/bin/python3", (test::source_dir() / "tools/reference/spm_ref.py").string(),
                   out.path().string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return json::parse(test::read_file(out / "expected.json"));
  }();
  return e;
}

std::string piece_list(const model::SentencePieceTokenizer& tok, const std::vector<int32_t>& ids,
                       size_t at) {
  std::ostringstream s;
  for (size_t i = at >= 3 ? at - 3 : 0; i < ids.size() && i < at + 4; i++) {
    s << (i == at ? " >" : " ") << ids[i] << '=';
    if (ids[i] >= 0 && static_cast<uint32_t>(ids[i]) < tok.vocab_size()) s << tok.piece(ids[i]);
  }
  return s.str();
}

// Where two id lists part, with the pieces around it; "" when they are equal.
std::string first_difference(const model::SentencePieceTokenizer& tok,
                             const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) at++;
  if (at == got.size() && at == want.size()) return "";
  return "first difference at token " + std::to_string(at) +
         "\n  ours:   " + piece_list(tok, got, at) + "\n  python: " + piece_list(tok, want, at);
}

}  // namespace

TEST_CASE("sentencepiece t5: 0 differences from the Python library on a megabyte of scripts") {
  if (!have_reference()) return;
  const json& e = expected();
  const auto& texts = e.at("texts");
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.get_ref<const std::string&>().size();
  CHECK(bytes >= 1000000);

  for (const std::string name : {"unigram", "bpe"}) {
    test::TempDir dir;
    test::write_file(dir / "spiece.model",
                     test::read_file(test::source_dir() / "tests/data/spm" / (name + ".model")));
    const auto tok = model::load_sentencepiece(dir.path(), SpmFlavor::T5);
    const json& ref = e.at(name);
    const auto& ids = ref.at("ids");
    const auto& decoded = ref.at("text");
    REQUIRE(ids.size() == texts.size());
    REQUIRE(decoded.size() == texts.size());
    size_t tokens = 0, differing = 0, decode_differing = 0, stream_differing = 0, unknown = 0,
           byte_pieces = 0;
    for (size_t i = 0; i < texts.size(); i++) {
      const std::string& text = texts[i].get_ref<const std::string&>();
      const std::vector<int32_t> want = ids[i].get<std::vector<int32_t>>();
      const std::vector<int32_t> got = tok->encode(text);
      tokens += want.size();
      const std::string diff = first_difference(*tok, got, want);
      if (!diff.empty() && differing++ < 5) {
        FAIL_CHECK(name << " text " << i << " (" << json(text.substr(0, 120)).dump()
                        << "): " << diff);
      }
      // decode, and the token bytes a stream shows, joined (the first word's space aside).
      const std::string& want_text = decoded[i].get_ref<const std::string&>();
      const std::string text_back = tok->decode(want);
      if (text_back != want_text && decode_differing++ < 5) {
        FAIL_CHECK(name << " text " << i << " decodes to " << json(text_back).dump()
                        << ", the library to " << json(want_text).dump());
      }
      // The model's detokenizer drops the space opening a piece while nothing is written yet.
      std::string stream;
      for (int32_t id : want) {
        const std::string piece_bytes = tok->token_bytes(id);
        stream +=
            stream.empty() && piece_bytes.starts_with(' ') ? piece_bytes.substr(1) : piece_bytes;
        unknown += id == tok->unk();
        byte_pieces += tok->piece(id).starts_with("<0x");
      }
      if (stream != want_text && stream_differing++ < 5) {
        FAIL_CHECK(name << " text " << i << " streams as " << json(stream).dump()
                        << ", the library decodes " << json(want_text).dump());
      }
    }
    MESSAGE(name << ": " << texts.size() << " texts, " << bytes << " bytes, " << tokens << " ids ("
                 << unknown << " <unk>, " << byte_pieces << " byte pieces); " << differing
                 << " differ, " << decode_differing << " decode differently, " << stream_differing
                 << " stream differently");
    CHECK(differing == 0);
    CHECK(decode_differing == 0);
    CHECK(stream_differing == 0);
    // The corpus reaches what the check is for: <unk> (unigram) and byte fallback (bpe).
    CHECK(unknown + byte_pieces > 0);
  }
}

TEST_CASE("sentencepiece marian: the library's pieces through vocab.json, and back") {
  if (!have_reference()) return;
  const json& e = expected();
  // vocab.json in Marian's order ("</s>" 0, "<unk>" 1, pieces, "<pad>" last) over both models'
  // pieces but every 13th, which the texts then meet as <unk>.
  json vocab = json::object();
  auto add = [&](const std::string& piece) {
    const size_t id = vocab.size();
    if (!vocab.contains(piece)) vocab[piece] = id;
  };
  add("</s>");
  add("<unk>");
  for (const char* name : {"unigram", "bpe"}) {
    const auto& pieces = e.at(name).at("pieces");
    for (size_t i = 0; i < pieces.size(); i++) {
      const std::string& p = pieces[i].get_ref<const std::string&>();
      if (i % 13 != 5 && p != "<pad>" && p != "<s>") add(p);
    }
  }
  add("<pad>");
  test::TempDir dir;
  const auto data = test::source_dir() / "tests/data/spm";
  test::write_file(dir / "source.spm", test::read_file(data / "unigram.model"));
  test::write_file(dir / "target.spm", test::read_file(data / "bpe.model"));
  test::write_file(dir / "vocab.json", vocab.dump());

  const auto& texts = e.at("texts");
  for (auto [name, side] :
       {std::pair<std::string, SpmSide>{"unigram", SpmSide::Source}, {"bpe", SpmSide::Target}}) {
    const auto tok = model::load_sentencepiece(dir.path(), SpmFlavor::Marian, side);
    const auto& sample = e.at(name).at("text_pieces");
    const auto& decoded = e.at(name).at("text");
    size_t differing = 0, unknown = 0, round_trips = 0, round_trip_differing = 0;
    for (size_t k = 0; k < sample.size(); k++) {
      const size_t i = k * 8;  // spm_ref.py's SAMPLE
      const std::string& text = texts[i].get_ref<const std::string&>();
      std::vector<int32_t> want;
      bool all_known = true;
      for (const auto& p : sample[k]) {
        const bool known = vocab.contains(p);
        want.push_back(known ? vocab[p].get<int32_t>() : 1);
        unknown += !known;
        all_known = all_known && known;
      }
      want.push_back(0);
      const std::vector<int32_t> got = tok->encode(text);
      const std::string diff = first_difference(*tok, got, want);
      if (!diff.empty() && differing++ < 5) {
        FAIL_CHECK(name << " text " << i << " (" << json(text.substr(0, 120)).dump()
                        << "): " << diff);
      }
      // Where no piece fell to <unk>, decode gives back the library's detokenization (the
      // model's normalised text; MarianTokenizer strips it, which changes nothing here).
      if (all_known) {
        round_trips++;
        const std::string back = tok->decode(got);
        const std::string& want_text = decoded[i].get_ref<const std::string&>();
        if (back != want_text && round_trip_differing++ < 5) {
          FAIL_CHECK(name << " text " << i << " decodes to " << json(back).dump()
                          << ", the library to " << json(want_text).dump());
        }
      }
    }
    MESSAGE(name << ": " << sample.size() << " texts, " << unknown << " pieces not in vocab.json, "
                 << round_trips << " round trips; " << differing << " differ, "
                 << round_trip_differing << " round trips differ");
    CHECK(differing == 0);
    CHECK(round_trip_differing == 0);
    CHECK(unknown > 0);
    CHECK(round_trips > sample.size() / 10);
  }
}
