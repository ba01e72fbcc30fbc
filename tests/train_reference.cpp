#include "tests/train_reference.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/formats/checkpoint.h"
#include "tests/ci.h"
#include "tests/compare.h"
#include "tests/files.h"
#include "tests/process.h"

namespace test {

bool has_torch() {
  if (run({"/usr/bin/python3", "-c", "import torch"}).exit_code == 0) return true;
  if (in_ci()) FAIL("CI=true and Debian's python3-torch is missing");
  MESSAGE(
      "skipped: /usr/bin/python3 has no torch (Debian: python3-torch, scripts/setup.sh --tests)");
  return false;
}

namespace {

// ids [rows, n] as a JSON array of rows.
nlohmann::json rows_of(const std::vector<int32_t>& ids, uint32_t n) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < ids.size(); i += n)
    out.push_back(std::vector<int32_t>(ids.begin() + long(i), ids.begin() + long(i + n)));
  return out;
}

double peak_of(const model::training::Parameters& p) {
  double peak = 0;
  for (const model::ExpectedTensor& e : p.tensors())
    for (float v : p.tensor(e.name)) peak = std::max(peak, std::abs(double(v)));
  return peak;
}

}  // namespace

ReferenceStep seq2seq_reference_step(const std::filesystem::path& dir, const ReferenceBatch& b) {
  const TempDir tmp;
  nlohmann::json batch{{"sources", rows_of(b.sources, b.S)},
                       {"inputs", rows_of(b.inputs, b.T)},
                       {"targets", rows_of(b.targets, b.T)}};
  if (!b.mask.empty()) batch["attention_mask"] = rows_of(b.mask, b.S);
  write_file(tmp / "batch.json", batch.dump());
  const CliResult r =
      run({"/usr/bin/python3", (source_dir() / "tools" / "reference" / "seq2seq_ref.py").string(),
           "--grads", dir.string(), (tmp / "batch.json").string(), (tmp / "grads").string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return {nlohmann::json::parse(r.out).at("loss").get<double>(),
          model::training::Parameters::from_checkpoint(*model::Checkpoint::load(tmp / "grads"))};
}

void check_reference_grads(const std::string& what, const model::training::Parameters& got,
                           const model::training::Parameters& ref) {
  const double step_peak = peak_of(ref);
  for (const model::ExpectedTensor& e : ref.tensors()) {
    const std::vector<float>& want = ref.tensor(e.name);
    double peak = 0;
    for (float v : want) peak = std::max(peak, std::abs(double(v)));
    if (e.name.ends_with("cross.c_k.bias") || e.name.ends_with("attn.c_attn.bias"))
      peak = std::max(peak, 1e-4 * step_peak);
    CHECK(close(what + "d loss / d " + e.name + " against PyTorch", got.tensor(e.name), want,
                {1e-5 * peak, 0}));
  }
}

}  // namespace test
