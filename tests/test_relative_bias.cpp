// T5's relative position buckets (model/formats/relative_bias.h) against the float64 reference's
// t5_bucket (tools/reference/seq2seq_ref.py, written from transformers' modeling_t5, its log in
// float32 as torch runs it), run by Debian's python3 and torch at test time: every relative
// position of a 1,024-token context, both directions, at t5's published bucket settings (32 up
// to 128) and others. None may differ. Then the expanded table's layout.
#include <doctest/doctest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "model/formats/relative_bias.h"
#include "tests/ci.h"
#include "tests/files.h"
#include "tests/process.h"

namespace {

constexpr int kReach = 1023;  // relative positions -kReach..kReach
const std::pair<uint32_t, uint32_t> kSettings[] = {{32, 128}, {8, 20}, {64, 256}, {16, 1000}};

}  // namespace

TEST_CASE("relative_bias: T5's buckets are the reference's at every distance") {
  const std::string script =
      "import json, sys, torch\n"
      "sys.path.insert(0, sys.argv[1])\n"
      "from seq2seq_ref import t5_bucket\n"
      "rel = torch.arange(-" + std::to_string(kReach) + ", " + std::to_string(kReach + 1) + ")\n"
      "out = {}\n"
      "for b, d in json.loads(sys.argv[2]):\n"
      "    for bi in (True, False):\n"
      "        out[f'{b},{d},{int(bi)}'] = t5_bucket(rel, bi, b, d).tolist()\n"
      "print(json.dumps(out))\n";
  nlohmann::json settings = nlohmann::json::array();
  for (auto [b, d] : kSettings) settings.push_back({b, d});
  const test::CliResult r = test::run({"/usr/bin/python3", "-c", script,
                                       (test::source_dir() / "tools/reference").string(),
                                       settings.dump()});
  if (r.exit_code != 0 && !test::in_ci()) {
    MESSAGE("SKIPPED: /usr/bin/python3 with torch could not run the reference: " << r.err);
    return;
  }
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json want = nlohmann::json::parse(r.out);
  for (auto [b, d] : kSettings)
    for (bool bi : {true, false}) {
      CAPTURE(b);
      CAPTURE(d);
      CAPTURE(bi);
      const auto& row = want.at(std::to_string(b) + "," + std::to_string(d) + "," + std::to_string(int(bi)));
      REQUIRE(row.size() == 2 * kReach + 1);
      int differ = 0;
      for (int rel = -kReach; rel <= kReach; rel++)
        differ += model::relative_bucket(rel, bi, b, d) != row[static_cast<size_t>(rel + kReach)].get<uint32_t>();
      CHECK(differ == 0);
    }
}

TEST_CASE("relative_bias: the table per head and relative position") {
  model::Config c = model::t5_config(32, 64, 1, 2, 100, false);
  c.n_ctx = 40;
  c.relative_buckets = 8;
  c.relative_max_distance = 20;
  std::vector<float> table(8 * 2);
  for (size_t i = 0; i < table.size(); i++) table[i] = float(i);  // bucket b, head h: 2b + h
  for (bool causal : {false, true}) {
    c.causal = causal;
    const std::vector<float> rows = model::relative_bias_rows(c, table);
    const uint32_t span = model::relative_bias_span(c);
    REQUIRE(span == 79);
    REQUIRE(rows.size() == 2 * span);
    for (int rel : {-39, -5, -1, 0, 1, 3, 39})
      for (uint32_t h = 0; h < 2; h++)
        CHECK(rows[size_t{h} * span + static_cast<size_t>(39 + rel)] ==
              float(2 * model::relative_bucket(rel, !causal, 8, 20) + h));
  }
  CHECK_THROWS_WITH(model::relative_bias_rows(c, std::vector<float>(3)),
                    doctest::Contains("not buckets x heads 16"));
}
