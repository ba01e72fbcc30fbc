// End-to-end goldens from an independent implementation: every folder of tests/data/models
// holds a small random checkpoint in the published layout and what PyTorch computed for it in
// float64 (tools/reference/make_goldens.py; see tests/data/models/README.md).
//
// Tolerance: 2e-5 relative to the row's largest |logit| (at least 1), at fp32 and at fp16. The
// engine accumulates in fp32 (GPU) or double (CPU) from the same weights the golden used (for
// fp16: the matrices rounded to fp16, vectors kept, as the engine stores them); the goldens
// were rounded once from float64. PyTorch's own float32 run of the same forward differs from
// float64 by at most 1.8e-6 of the row's scale on these models.
// Greedy continuations must match id for id: the goldens' top-2 margins are all above 3e-3,
// orders of magnitude above either engine's error.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/forward/cpu_model.h"
#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"
#include "model/generation/generate.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"

namespace {

struct Golden {
  std::filesystem::path dir;
  nlohmann::json j;
  std::vector<int32_t> ids() const { return j["ids"].get<std::vector<int32_t>>(); }
  std::vector<float> logits(const char* key) const {
    const std::string bytes = test::read_file(dir / j[key].get<std::string>());
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
  }
};

std::vector<Golden> goldens() {
  std::vector<Golden> all;
  for (const auto& e :
       std::filesystem::directory_iterator(test::source_dir() / "tests/data/models"))
    if (std::filesystem::exists(e.path() / "goldens.json"))
      all.push_back({e.path(), nlohmann::json::parse(test::read_file(e.path() / "goldens.json"))});
  std::sort(all.begin(), all.end(), [](const Golden& a, const Golden& b) { return a.dir < b.dir; });
  return all;
}

std::vector<int32_t> greedy(model::Model& m, const std::vector<int32_t>& prompt, uint32_t n) {
  model::GenerateOptions o;
  o.max_new = n;
  o.sampling.temperature = 0;
  return model::generate(m, prompt, o, [](int32_t) {}).tokens;
}

double mean_nll(const std::vector<float>& logits, const std::vector<int32_t>& ids, size_t V) {
  double nll = 0;
  for (size_t t = 0; t + 1 < ids.size(); t++) {
    const float* row = &logits[t * V];
    double m = -INFINITY, sum = 0;
    for (size_t v = 0; v < V; v++) m = std::max(m, double{row[v]});
    for (size_t v = 0; v < V; v++) sum += std::exp(double{row[v]} - m);
    nll += m + std::log(sum) - double{row[ids[t + 1]]};
  }
  return nll / double(ids.size() - 1);
}

}  // namespace

TEST_CASE("goldens: there are golden models to check") {
  CHECK(goldens().size() >= 15);
}

TEST_CASE("goldens: the CPU reference matches PyTorch's logits and greedy ids") {
  for (const Golden& g : goldens()) {
    const std::string name = g.dir.filename().string();
    CAPTURE(name);
    auto ckpt = model::Checkpoint::load(g.dir);
    const size_t V = ckpt->config().n_vocab;
    auto cpu = model::make_cpu_model(*ckpt, model::Precision::F32);
    const std::vector<float> logits = cpu->logits(g.ids());
    CHECK(test::close_rows(name + " cpu f32", logits, g.logits("logits_f32"), V, 2e-5));
    CHECK(std::fabs(mean_nll(logits, g.ids(), V) - g.j["mean_nll"].get<double>()) < 1e-5);
    CHECK(greedy(*cpu, g.j["greedy_prompt"], 32) == g.j["greedy_ids"].get<std::vector<int32_t>>());
  }
}

// Both kernel sets: what a GPU runs and what a CPU device runs, each as a whole model.
TEST_CASE("goldens: the GPU matches PyTorch's logits and greedy ids at fp32 and fp16") {
  GPU_TEST(gpu);
  for (const Golden& g : goldens()) {
    auto ckpt = model::Checkpoint::load(g.dir);
    const size_t V = ckpt->config().n_vocab;
    const std::vector<int32_t> prompt = g.j["greedy_prompt"];
    for (vk::KernelSet ks : test::kKernelSets) {
      const std::string name = g.dir.filename().string() + ", " + test::kernels_name(ks);
      CAPTURE(name);
      auto f32 = test::gpu_model(gpu, *ckpt, model::Precision::F32, ks);
      CHECK(test::close_rows(name + " f32", f32->logits(g.ids()), g.logits("logits_f32"), V, 2e-5));
      CHECK(greedy(*f32, prompt, 32) == g.j["greedy_ids"].get<std::vector<int32_t>>());

      auto f16 = test::gpu_model(gpu, *ckpt, model::Precision::F16, ks);
      CHECK(test::close_rows(name + " f16", f16->logits(g.ids()), g.logits("logits_f16_weights"), V,
                             2e-5));
      CHECK(greedy(*f16, prompt, 32) == g.j["greedy_ids_f16_weights"].get<std::vector<int32_t>>());
    }
  }
}
