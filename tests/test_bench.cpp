// gpt2vk bench end to end on the tiny golden model: the JSON a script reads, the table, and the
// profile's counters that prove one submission and one fence wait per decoded token.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "model/ops/gpu/matmul.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/gpu.h"

namespace {

std::string tiny() {
  return (test::source_dir() / "tests/data/models/gpt2-tiny").string();
}

// GPT-2's parameter count from its config (tests/data/models/gpt2-tiny/config.json: V = 256,
// n_ctx = 64, C = 32, 2 layers, n_inner = 4C, tied head): per layer 12C² in matrices and 13C in
// biases and LayerNorms; wte and wpe; ln_f.
constexpr uint64_t V = 256, N_CTX = 64, C = 32, L = 2;
constexpr uint64_t kMatrixParams = 12 * L * C * C + (V + N_CTX) * C;
constexpr uint64_t kVectorParams = 13 * L * C + 2 * C;

// The value in the row `| name | value |` of the first table after `section` in `text`.
std::string row_value(const std::string& text, const std::string& section,
                      const std::string& name) {
  const size_t at = text.find(section);
  if (at == std::string::npos) return "<no section '" + section + "'>";
  std::smatch m;
  const std::string rest = text.substr(at);
  if (!std::regex_search(rest, m, std::regex("\\|\\s*" + name + "\\s*\\|\\s*([^|]*?)\\s*\\|")))
    return "<no row '" + name + "'>";
  return m[1];
}

// Every cell of each row of the first table after `section` whose op kind starts with `prefix`.
std::vector<std::vector<std::string>> rows_starting(const std::string& text,
                                                    const std::string& section,
                                                    const std::string& prefix) {
  std::vector<std::vector<std::string>> rows;
  const size_t at = text.find(section);
  if (at == std::string::npos) return rows;
  std::istringstream lines(text.substr(at));
  std::string line;
  bool in_table = false;
  while (std::getline(lines, line)) {
    if (line.rfind("|", 0) != 0) {
      if (in_table) break;  // the first table ended
      continue;
    }
    in_table = true;
    std::vector<std::string> cells;
    std::istringstream parts(line.substr(1));
    std::string cell;
    while (std::getline(parts, cell, '|')) {
      const size_t b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
    }
    if (!cells.empty() && cells[0].rfind(prefix, 0) == 0) rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST_CASE("bench: --json has one entry per test with positive rates and the model's size") {
  GPU_TEST(g);
  const test::CliResult r =
      test::gpt2vk({"bench", "-m", tiny(), "-p", "8", "-n", "4", "-r", "2", "--json"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(test::no_validation_messages(r));
  const nlohmann::json j = nlohmann::json::parse(r.out);  // stdout is the JSON and nothing else
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 2);
  CHECK(j[0]["test"] == "pp8");
  CHECK(j[0]["n_prompt"] == 8);
  CHECK(j[0]["n_gen"] == 0);
  CHECK(j[1]["test"] == "tg4");
  CHECK(j[1]["n_prompt"] == 0);
  CHECK(j[1]["n_gen"] == 4);
  for (const nlohmann::json& e : j) {
    CAPTURE(e.dump());
    CHECK(e["model"] == "gpt2-tiny");
    CHECK(e["backend"] == "Vulkan");
    CHECK(!e["device"].get<std::string>().empty());
    CHECK(e["precision"] == "f16");
    CHECK(e["kv_cache"] == "f32");
    CHECK(e["params"] == kMatrixParams + kVectorParams);
    CHECK(e["size"] == 2 * kMatrixParams + 4 * kVectorParams);  // fp16 matrices, fp32 vectors
    REQUIRE(e["samples_ts"].size() == 2);
    double sum = 0;
    for (const nlohmann::json& s : e["samples_ts"]) {
      CHECK(s.get<double>() > 0);
      sum += s.get<double>();
    }
    CHECK(e["avg_ts"].get<double>() == doctest::Approx(sum / 2).epsilon(1e-4));
    CHECK(e["stddev_ts"].get<double>() >= 0);
  }
}

TEST_CASE("bench: the table, and a profile of one submission and one wait per token") {
  GPU_TEST(g);
  for (vk::KernelSet ks : test::kKernelSets) {
    CAPTURE(vk::kernel_set_name(ks));
    const model::gpu::KernelPolicy policy = model::gpu::choose_policy(g.device.caps(), ks);
    const test::CliResult r =
        test::gpt2vk({"bench", "-m", tiny(), "-p", "8", "-n", "4", "-r", "1", "--precision", "f32",
                      "--profile", "--kernels", vk::kernel_set_name(ks)});
    CAPTURE(r.out);
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(test::no_validation_messages(r));
    CHECK(r.out.find("| model ") != std::string::npos);
    CHECK(std::regex_search(
        r.out, std::regex(R"(\| gpt2-tiny .*\| +f32 +\| +pp8 \| +[0-9.]+ ± [0-9.]+ \|)")));
    CHECK(std::regex_search(
        r.out, std::regex(R"(\| gpt2-tiny .*\| +f32 +\| +tg4 \| +[0-9.]+ ± [0-9.]+ \|)")));

    for (const char* section :
         {"profile: prefill of 8 tokens", "profile: decode, mean of 4 tokens"}) {
      CAPTURE(section);
      CHECK(row_value(r.out, section, "submits") == "1");
      CHECK(row_value(r.out, section, "fence waits") == "1");
      CHECK(std::stod(row_value(r.out, section, "dispatches run")) >= 10);
      if (std::string(section).find("prefill") != std::string::npos) {  // recorded
        CHECK(row_value(r.out, section, "replays of a recording") == "0");
        CHECK(std::stod(row_value(r.out, section, "commands recorded")) >=
              std::stod(row_value(r.out, section, "dispatches run")));
        CHECK(std::stod(row_value(r.out, section, "descriptor writes")) >=
              std::stod(row_value(r.out, section, "dispatches run")));
      } else {  // the first decode step's recording, replayed for every later one
        CHECK(row_value(r.out, section, "replays of a recording") == "1");
        CHECK(row_value(r.out, section, "commands recorded") == "0");
        CHECK(row_value(r.out, section, "descriptor writes") == "0");
        CHECK(row_value(r.out, section, "pipeline binds recorded") == "0");
      }
      // The matmuls' arithmetic (GFLOP per pass, 4 significant digits a row): 2 T 12 L C^2 in
      // the blocks, and the head's 2 C V for the one row it reads; GFLOP/s is that over the
      // matmuls' time.
      const bool prefill = std::string(section).find("prefill") != std::string::npos;
      const double want = (2.0 * (prefill ? 8 : 1) * 12 * L * C * C + 2.0 * C * V) / 1e9;
      double gflop = 0;
      for (const std::vector<std::string>& row : rows_starting(r.out, section, "matmul")) {
        CAPTURE(row[0]);
        REQUIRE(row.size() == 10);  // op, dispatches, ms, share, longest, MB, GB/s, %, GFLOP, /s
        gflop += std::stod(row[8]);
        // ms/pass has 3 decimals: up to 0.0005 ms off, a large share of a tiny op's time.
        const double ms = std::stod(row[2]);
        REQUIRE(ms > 0);
        CHECK(std::stod(row[9]) ==
              doctest::Approx(std::stod(row[8]) / (ms * 1e-3)).epsilon(2e-3 + 6e-4 / ms));
      }
      CHECK(gflop == doctest::Approx(want).epsilon(2e-3));
      // Every op kind of GPT-2's forward pass has a GPU time.
      CHECK(row_value(r.out, section, "embedding").find("<no row") == std::string::npos);
      // Greedy decoding reads back a top-1: from a top-k pass, or with the CPU kernel set from
      // the interleaved head's own argmax (no top-k pass at all).
      if (policy.interleaved_weights)
        CHECK(row_value(r.out, section, "topk").find("<no row") != std::string::npos);
      else
        CHECK(row_value(r.out, section, "topk").find("<no row") == std::string::npos);
      // The matmul kernel depends on the device (interleaved texel on CPU devices, wide for the
      // GPU set's few rows) and on T, the attention kernel on the device: on CPU devices texel,
      // with kv_store fused in; the GPU set's split kernel for up to 8 queries.
      const auto any_row = [&](std::initializer_list<const char*> ops) {
        bool found = false;
        for (const char* op : ops)
          found = found || row_value(r.out, section, op).find("<no row") == std::string::npos;
        return found;
      };
      CHECK(any_row(
          {"matmul_interleaved", "matmul_interleaved_shuffle", "matmul_vec_texel", "matmul_vec_wide",
           "matmul_vec", "matmul"}));
      // LayerNorms: the GPU set fuses every one of this model's into the wide GEMV at these
      // few rows (norm_linear); the CPU set keeps the final one, before its argmax head.
      if (policy.set == vk::KernelSet::Gpu)
        CHECK_FALSE(any_row({"layernorm"}));
      else
        CHECK(any_row({"layernorm_texel", "layernorm"}));
      const bool fused = any_row({"attention_texel_store"});
      const bool split = any_row({"attention_split"});
      // The KV store: fused into the texel or the split kernel, or kv_store before attention.
      CHECK((fused || split ||
             (any_row({"kv_store"}) && any_row({"attention", "attention_tiled"}))));
      if (fused || split) CHECK_FALSE(any_row({"kv_store"}));
      // The split kernel merges its key blocks itself (the model gives it the counts): no
      // attention_merge dispatch, where the tiled kernel does not split a prompt's keys.
      if (split && !any_row({"attention_tiled"})) CHECK_FALSE(any_row({"attention_merge"}));
    }
  }
}

TEST_CASE("bench: runs on the CPU reference, and refuses a prompt past the context") {
  const test::CliResult cpu =
      test::gpt2vk({"bench", "-m", tiny(), "-p", "4", "-n", "2", "-r", "1", "--device", "cpu"});
  CAPTURE(cpu.err);
  CHECK(cpu.exit_code == 0);
  CHECK(std::regex_search(cpu.out, std::regex(R"(\| CPU +\|.*\| +pp4 \|)")));
  CHECK(std::regex_search(cpu.out, std::regex(R"(\| CPU +\|.*\| +tg2 \|)")));

  const test::CliResult skip =
      test::gpt2vk({"bench", "-m", tiny(), "-p", "0", "-n", "0", "--device", "cpu"});
  CHECK(skip.exit_code == 1);
  CHECK(skip.err.find("nothing to run") != std::string::npos);
  const test::CliResult past = test::gpt2vk({"bench", "-m", tiny(), "-p", "65", "--device", "cpu"});
  CHECK(past.exit_code == 1);
  CHECK(past.err.find("-p 65: longer than the model's context of 64 tokens") != std::string::npos);
  CHECK(past.out.empty());
}

TEST_CASE("bench --profile --bandwidth: the bytes each op reads and the fraction reached") {
  GPU_TEST(g);
  // A decoded token's matmuls read every matrix once (12 L C² in the blocks, V C in the tied
  // head: 131,072 bytes at fp32) plus their x rows and biases (about 4 KB here); the CPU set's
  // interleaved weights pad N to blocks of 64 rows (c_attn's 96 to 128), under 1.5 times that.
  constexpr double matrices_mb = 4.0 * (12 * L * C * C + V * C) / 1e6;
  for (vk::KernelSet ks : test::kKernelSets) {
    CAPTURE(vk::kernel_set_name(ks));
    const test::CliResult r =
        test::gpt2vk({"bench", "-m", tiny(), "-p", "0", "-n", "4", "-r", "1", "--precision", "f32",
                      "--profile", "--bandwidth", "100", "--kernels", vk::kernel_set_name(ks)});
    CAPTURE(r.out);
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    const std::string section = r.out.substr(r.out.find("profile: decode"));
    // | op | dispatches | ms | share | longest | MB read | GB/s | of bandwidth |
    const std::regex row(R"(\| (\S+) +\| +[0-9.]+ \| +([0-9.]+) \|[^|]*\|[^|]*\| +([0-9.]+) \| +([0-9.e+-]+) \| +([0-9.]+)% \|)");
    double matmul_mb = 0;
    int rows = 0;
    for (std::sregex_iterator it(section.begin(), section.end(), row), end; it != end; ++it) {
      const std::smatch& m = *it;
      const double ms = std::stod(m[2]), mb = std::stod(m[3]), gbs = std::stod(m[4]);
      const double pct = std::stod(m[5]);
      rows++;
      if (m[1].str().rfind("matmul", 0) == 0) matmul_mb += mb;
      // GB/s is MB / ms, and the fraction its share of the 100 GB/s given (both rounded).
      if (ms > 0.01 && mb > 0.01) {
        CHECK(gbs == doctest::Approx(mb / ms).epsilon(0.05));
        CHECK(pct == doctest::Approx(gbs).epsilon(0.05));
      }
    }
    CHECK(rows >= 4);
    CHECK(matmul_mb >= matrices_mb);
    CHECK(matmul_mb <= 1.5 * matrices_mb);
  }
  const test::CliResult bad = test::gpt2vk({"bench", "-m", tiny(), "--bandwidth", "-3"});
  CHECK(bad.exit_code != 0);
}

TEST_CASE("bench --parallel: tg tests again with N sequences decoding together") {
  GPU_TEST(g);
  const test::CliResult r = test::gpt2vk({"bench", "-m", tiny(), "-p", "0", "-n", "4", "-r", "1",
                                          "--parallel", "1,3", "--json", "--profile"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(test::no_validation_messages(r));
  const nlohmann::json j = nlohmann::json::parse(r.out);
  REQUIRE(j.size() == 3);
  CHECK(j[0]["test"] == "tg4");
  CHECK(j[1]["test"] == "tg4 x1");
  CHECK(j[2]["test"] == "tg4 x3");
  for (const nlohmann::json& e : j) CHECK(e["avg_ts"].get<double>() > 0);
  // The ratio line, and the profile of a batched pass: 3 rows in one embedding dispatch, one
  // submission, and after the first step the recording of the step before submitted again.
  CHECK(r.err.find("tg4 x3: ") != std::string::npos);
  CHECK(r.err.find("x the aggregate tokens/s of tg4") != std::string::npos);
  const std::string batch = "profile: decode of 3 sequences together";
  CHECK(row_value(r.err, batch, "embedding") == "1");  // dispatches per pass
  CHECK(row_value(r.err, batch, "submits") == "1");
  CHECK(row_value(r.err, batch, "fence waits") == "1");
  CHECK(row_value(r.err, batch, "replays of a recording") == "1");
  CHECK(row_value(r.err, batch, "commands recorded") == "0");
  // A wrong count is refused by the option's range.
  CHECK(test::gpt2vk({"bench", "-m", tiny(), "--parallel", "9"}).exit_code != 0);
}
