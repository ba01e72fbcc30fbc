// When the Vulkan side fails: no loader, no driver, no such device, too little device memory, a
// submission that does not finish in time, a lost device. Each is a clear error (one line, exit
// code 1 on the command line), never a hang or a crash, and --device cpu works regardless.
// And --split-layers, for drivers whose watchdog ends long submissions: the same logits from
// several submissions.
//
// What is simulated, and how: the memory budget (vk::LimitOverrides::device_memory,
// GPT2VK_DEVICE_MEMORY_MIB) stands in for a small GPU; a lost device is the test hook
// vk::DeviceOptions::lose_device_at_wait (GPT2VK_LOSE_DEVICE_AT_WAIT), since lavapipe cannot
// be made to lose itself. The timeout is real: a bound shorter than a real submission.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <thread>

#include "model/forward/gpu_model.h"
#include "model/generation/generate.h"
#include "model/ops/gpu/activation.h"
#include "tests/cli.h"
#include "tests/compare.h"
#include "tests/files.h"
#include "tests/gpu.h"
#include "tests/model_fixture.h"
#include "tests/process.h"
#include "vk/check.h"

namespace {

std::string tiny() {
  return (test::source_dir() / "tests/data/models/gpt2-tiny").string();
}

// The last line of a command's stderr, and how many lines say "error".
std::string last_line(const std::string& err) {
  const size_t end = err.ends_with('\n') ? err.size() - 1 : err.size();
  const size_t start = err.rfind('\n', end - 1);
  return err.substr(start == std::string::npos ? 0 : start + 1,
                    end - (start == std::string::npos ? 0 : start + 1));
}

size_t error_lines(const std::string& err) {
  size_t n = 0;
  for (size_t at = err.find("gpt2vk: error: "); at != std::string::npos;
       at = err.find("gpt2vk: error: ", at + 1))
    n++;
  return n;
}

// An error exit whose last stderr line is the only error and says `message`.
void check_error(const test::CliResult& r, const std::string& message) {
  CAPTURE(r.err);
  CHECK(r.exit_code == 1);
  CHECK(error_lines(r.err) == 1);
  CHECK(last_line(r.err).starts_with("gpt2vk: error: "));
  CHECK(last_line(r.err).find(message) != std::string::npos);
}

vk::DeviceOptions same_device(const test::Gpu& g) {
  vk::DeviceOptions o;
  o.select = std::to_string(g.device.index());
  o.coop_matrix = test::coop_matrix();
  return o;
}

// Four GELUs over 4M floats, x -> y -> x -> ...: tens of milliseconds on lavapipe, tens of
// microseconds on a GPU, long next to a nanosecond either way.
struct Work {
  static constexpr uint32_t kFloats = 4u << 20;
  vk::Arena arena;
  vk::BufferSpan x, y;
  explicit Work(const vk::Device& d)
      : arena(d, 2ull * kFloats * 4 + 1024, vk::MemoryKind::Device, "work") {
    x = arena.alloc(uint64_t{kFloats} * 4);
    y = arena.alloc(uint64_t{kFloats} * 4);
  }
  void record(const model::gpu::Ops& k, vk::Recorder& rec) {
    rec.begin();
    for (int i = 0; i < 4; i++)
      model::gpu::activation(k, rec,
                             {.out = i % 2 ? x : y,
                              .x = i % 2 ? y : x,
                              .n = kFloats,
                              .kind = model::Activation::GeluTanh});
    rec.end();
  }
};

}  // namespace

TEST_CASE("device faults: an unknown device index or name lists the devices") {
  GPU_TEST(g);
  for (const char* sel : {"99", "no-such-gpu"}) {
    const test::CliResult r = test::gpt2vk({"generate", "-m", tiny(), "-p", "a", "--device", sel});
    check_error(r, std::string("no Vulkan device matches '") + sel + "' (by " +
                       (sel[0] == '9' ? "index" : "name") + "); devices: device 0 '");
    CHECK(r.err.find("or cpu for the CPU reference, which needs no Vulkan") != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("device faults: no Vulkan driver, or no loader: a clear error; --device cpu still runs") {
  GPU_TEST(g);  // the loader and a driver are installed; the tests take them away
  const test::Env no_driver = {{"VK_ICD_FILENAMES", "/nonexistent/icd.json"},
                               {"VK_DRIVER_FILES", "/nonexistent/icd.json"}};
  const test::Env no_loader = {{"GPT2VK_VULKAN_LOADER", "/nonexistent/libvulkan.so.1"}};
  const test::Env not_a_loader = {{"GPT2VK_VULKAN_LOADER", "libc.so.6"}};
  struct Case {
    const test::Env& env;
    std::string message;
  };
  const Case cases[] = {
      {no_driver, "no Vulkan driver found (the loader has no ICD supporting Vulkan 1.2)"},
      {no_loader,
       "the Vulkan loader '/nonexistent/libvulkan.so.1' (GPT2VK_VULKAN_LOADER) is unusable: "},
      {not_a_loader,
       "the Vulkan loader 'libc.so.6' (GPT2VK_VULKAN_LOADER) is unusable: it has no "
       "vkGetInstanceProcAddr"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    check_error(test::gpt2vk({"generate", "-m", tiny(), "-p", "a", "-n", "2"}, c.env), c.message);
    check_error(test::gpt2vk({"devices"}, c.env), c.message);
    const test::CliResult cpu =
        test::gpt2vk({"generate", "-m", tiny(), "-p", "a", "-n", "2", "--device", "cpu"}, c.env);
    CHECK(cpu.exit_code == 0);
    CHECK(cpu.err.find("generated 2 tokens") != std::string::npos);
  }
  // The variable does load a real loader: the system's, by its soname.
  const test::CliResult ok = test::gpt2vk({"generate", "-m", tiny(), "-p", "a", "-n", "2"},
                                          {{"GPT2VK_VULKAN_LOADER", "libvulkan.so.1"}});
  CHECK(ok.exit_code == 0);
  CHECK(test::no_validation_messages(ok));
}

TEST_CASE("device faults: out of device memory says what was asked and what the device has") {
  GPU_TEST(g);
  vk::DeviceOptions o = same_device(g);
  o.overrides.device_memory = 1 << 20;
  vk::Device small(g.instance, o);
  CHECK(small.caps().device_local_bytes == 1 << 20);
  {
    vk::Arena a(small, 600 << 10, vk::MemoryKind::Device, "a");
    CHECK_THROWS_WITH_AS(vk::Arena(small, 600 << 10, vk::MemoryKind::Device, "b"),
                         doctest::Contains(("out of device memory on '" + small.caps().name +
                                            "': arena 'b' needs 600.0 KiB, with 600.0 KiB already "
                                            "allocated, of the device's 1.0 MiB")
                                               .c_str()),
                         vk::Error);
    vk::Arena staging(small, 600 << 10, vk::MemoryKind::Staging, "staging");  // host memory
  }
  vk::Arena b(small, 600 << 10, vk::MemoryKind::Device, "b");  // a's memory came back

  // A checkpoint larger than the device: the command names the arena, the sizes, the way out.
  const test::CliResult r =
      test::gpt2vk({"generate", "-m", tiny(), "-p", "a", "--precision", "f32"},
                   {{"GPT2VK_DEVICE_MEMORY_MIB", "0.05"}});
  check_error(r,
              "out of device memory on '" + g.device.caps().name + "': arena 'weights 0' needs ");
  CHECK(last_line(r.err).find("of the device's 51.2 KiB (a budget set for testing) "
                              "(VK_ERROR_OUT_OF_DEVICE_MEMORY): try --precision f16, a smaller "
                              "model, or --device cpu") != std::string::npos);
  CHECK(test::no_validation_messages(r));
}

TEST_CASE(
    "device faults: a submission past the fence bound is an error, and the device stays refused") {
  GPU_TEST(g);
  vk::Device device(g.instance, same_device(g));
  vk::Kernels pipelines(device);
  const model::gpu::Ops kernels(pipelines);
  Work work(device);
  vk::Recorder rec(device);  // after the memory it uses: destroyed first, settling the work
  work.record(kernels, rec);
  rec.submit();
  CHECK_THROWS_WITH_AS(rec.wait(1e-9),
                       doctest::Contains(("device '" + device.caps().name +
                                          "': a submission did not finish within 1e-09 s (a hung "
                                          "GPU, or work too long for it: try --split-layers N")
                                             .c_str()),
                       vk::Error);
  CHECK(device.lost());
  CHECK_THROWS_WITH_AS(rec.submit(),
                       doctest::Contains("cannot run more work: a submission did not finish"),
                       vk::Error);
  // The command line: a bound below any real forward pass.
  check_error(test::gpt2vk({"generate", "-m", tiny(), "-p", "Hello", "-n", "4"},
                           {{"GPT2VK_FENCE_TIMEOUT", "1e-9"}}),
              "a submission did not finish within 1e-09 s");
  check_error(
      test::gpt2vk({"generate", "-m", tiny(), "-p", "a"}, {{"GPT2VK_FENCE_TIMEOUT", "soon"}}),
      "GPT2VK_FENCE_TIMEOUT='soon': not a positive number");
}

TEST_CASE("device faults: a lost device is an error, and every later use of it too") {
  GPU_TEST(g);
  vk::DeviceOptions o = same_device(g);
  o.lose_device_at_wait = 2;
  vk::Device device(g.instance, o);
  vk::Kernels pipelines(device);
  const model::gpu::Ops kernels(pipelines);
  Work work(device);
  vk::Recorder rec(device);
  work.record(kernels, rec);
  rec.submit();
  rec.wait();  // the first wait is fine
  rec.submit();
  const std::string lost = "the device was lost (VK_ERROR_DEVICE_LOST) while running a submission";
  CHECK_THROWS_WITH_AS(rec.wait(),
                       doctest::Contains(("device '" + device.caps().name + "': " + lost).c_str()),
                       vk::Error);
  CHECK_THROWS_WITH_AS(rec.submit(), doctest::Contains(("cannot run more work: " + lost).c_str()),
                       vk::Error);
  CHECK_THROWS_WITH_AS(work.record(kernels, rec), doctest::Contains("cannot run more work"),
                       vk::Error);

  const test::CliResult r = test::gpt2vk({"generate", "-m", tiny(), "-p", "a", "-n", "4"},
                                         {{"GPT2VK_LOSE_DEVICE_AT_WAIT", "1"}});
  check_error(r, lost);
  CHECK(test::no_validation_messages(r));
  // The text streamed before the failure (none where uploads wait first) ends its line.
  CHECK((r.out.empty() || r.out.ends_with("\n")));
}

TEST_CASE("--split-layers: the same logits from one submission per N blocks") {
  GPU_TEST(g);
  model::Config c = test::tiny_config();
  c.n_layer = 5;
  test::TinyModel m(c);
  const std::vector<int32_t> ids = {3, 141, 59, 26, 5, 35, 89, 79};
  const int32_t next[] = {32};
  for (vk::KernelSet ks : test::kKernelSets) {
    CAPTURE(test::kernels_name(ks));
    auto run = [&](uint32_t split, uint32_t submits) {
      CAPTURE(split);
      model::GpuModelOptions o{model::Precision::F16, true, split, {}};
      auto gpu = model::make_gpu_model(*m.checkpoint, g.with_kernels(ks), o);
      gpu->set_taps(true);
      const std::vector<float> logits = gpu->logits(ids);
      CHECK(model::gpu_stats(*gpu).submits == submits);
      CHECK(model::gpu_stats(*gpu).waits == submits);

      // Every dispatch of every part has its time.
      CHECK(model::gpu_timings(*gpu).size() ==
            (g.device.caps().timestamps ? model::gpu_stats(*gpu).dispatches : 0));
      const std::vector<std::vector<float>> taps = gpu->taps();
      gpu->set_taps(false);
      const model::Candidates top = gpu->next(next, 5);
      CHECK(model::gpu_stats(*gpu).submits == submits);
      // The barriers too: a dispatch reading what an earlier part wrote still gets its barrier.
      const uint32_t barriers = model::gpu_stats(*gpu).barriers;
      return std::make_tuple(logits, taps, top.ids, top.logits, barriers);
    };
    const auto whole = run(0, 1);
    // The same dispatches in the same order: the same bits.
    CHECK((run(1, 5) == whole));  // not 6: the last block's submission runs the head
    CHECK((run(2, 3) == whole));  // 2 + 2 + 1 blocks
  }

  // The command line: the profile counts the submissions of a decoded token.
  const test::CliResult p = test::gpt2vk(
      {"bench", "-m", tiny(), "-p", "4", "-n", "2", "-r", "1", "--profile", "--split-layers", "1"});
  CAPTURE(p.out);
  std::smatch row;
  const std::string decode = p.out.substr(std::min(p.out.size(), p.out.find("profile: decode")));
  REQUIRE(std::regex_search(decode, row, std::regex(R"(\|\s*submits\s*\|\s*([^|]*?)\s*\|)")));
  CHECK(row[1] == "2");  // gpt2-tiny has 2 blocks
  CHECK(test::no_validation_messages(p));
}

// The rates a GPU runs at, from what its passes showed: XL's 512-token prompt, estimated at
// about 58 s at the nominal rates, took 0.367 s on an H200 cut into 144 submissions; at the
// speed that shows (158x, a quarter of it used) the same prompt is one chunk in 3 submissions,
// and at the speed its GPU time alone shows (0.109 s: 530x), one submission.
TEST_CASE("submissions: the rates follow the speed the device has shown") {
  model::Config xl = test::tiny_config();
  xl.n_embd = 1600, xl.n_head = 25, xl.n_inner = 6400, xl.n_layer = 48;
  const model::SubmissionRates nominal;
  const double pass = xl.n_layer * model::block_seconds(xl, 512, 512, model::DType::F16, nominal);
  CHECK(pass > 30);
  CHECK(model::prompt_chunks(xl, 512, 0, model::DType::F16, nominal).size() > 1);
  const double shown = model::observed_speed(pass, 0.367);
  CHECK(shown == doctest::Approx(pass / 0.367));
  const model::SubmissionRates after = model::calibrated(nominal, shown);
  CHECK(after.flops_per_s == doctest::Approx(nominal.flops_per_s * shown / model::kSpeedMargin));
  CHECK(after.budget_s == nominal.budget_s);
  CHECK(model::prompt_chunks(xl, 512, 0, model::DType::F16, after) == std::vector<uint32_t>{512});
  CHECK(model::blocks_per_submission(xl, 512, 512, model::DType::F16, after) >= 16);
  const model::SubmissionRates gpu_time = model::calibrated(nominal, model::observed_speed(pass, 0.109));
  CHECK(model::blocks_per_submission(xl, 512, 512, model::DType::F16, gpu_time) == 48);
  // Nothing measured, a slower device than the nominal, or a broken clock change nothing, or
  // not without bound.
  CHECK(model::observed_speed(pass, 0) == 1);
  CHECK(model::observed_speed(0, 1) == 1);
  CHECK(model::observed_speed(1, 100) == 1);
  CHECK(model::observed_speed(pass, 1e-12) == model::kMaxSpeed);
  CHECK(model::calibrated(nominal, 2).flops_per_s == nominal.flops_per_s);
}

TEST_CASE("submissions: a pass is cut by its estimated cost, with the same logits") {
  // The estimate: GPT-2 small decodes in one submission and prefills 128 tokens in a few;
  // GPT-2 XL's 1024-token prefill takes one block per submission (each alone is over budget).
  model::Config small = test::tiny_config();
  small.n_embd = 768, small.n_head = 12, small.n_inner = 3072, small.n_layer = 12;
  const model::SubmissionRates rates;
  CHECK(model::blocks_per_submission(small, 1, 100, model::DType::F16, rates) == 12);
  const uint32_t pp128 = model::blocks_per_submission(small, 128, 128, model::DType::F16, rates);
  CHECK(pp128 >= 4);
  CHECK(pp128 < 12);
  CHECK(pp128 * model::block_seconds(small, 128, 128, model::DType::F16, rates) <= rates.budget_s);
  model::Config xl = small;
  xl.n_embd = 1600, xl.n_head = 25, xl.n_inner = 6400, xl.n_layer = 48;
  CHECK(model::block_seconds(xl, 1024, 1024, model::DType::F16, rates) > rates.budget_s);
  CHECK(model::blocks_per_submission(xl, 1024, 1024, model::DType::F16, rates) == 1);
  // Attention's share grows with the keys: a decoded token late in a long context costs more.
  CHECK(model::block_seconds(xl, 1, 1024, model::DType::F16, rates) >
        model::block_seconds(xl, 1, 10, model::DType::F16, rates));

  // On the device: rates so slow that every block is its own submission give the bits of one.
  GPU_TEST(g);
  model::Config c = test::tiny_config();
  c.n_layer = 5;
  test::TinyModel m(c);
  const std::vector<int32_t> ids = {3, 141, 59, 26, 5, 35, 89, 79};
  for (vk::KernelSet ks : test::kKernelSets) {
    CAPTURE(test::kernels_name(ks));
    model::GpuModelOptions whole{model::Precision::F16, false, 0, {}};
    model::GpuModelOptions slow = whole;
    // So slow that a block alone takes minutes (the waits' timeout grows past the device's),
    // with a budget of exactly one block: one block per submission, the prompt in one pass.
    model::SubmissionRates crawl{1e3, 1e3, 0};
    crawl.budget_s = model::block_seconds(c, 8, 8, model::DType::F16, crawl);
    REQUIRE(model::prompt_chunks(c, 8, 0, model::DType::F16, crawl).size() == 1);
    slow.rates = crawl;
    auto a = model::make_gpu_model(*m.checkpoint, g.with_kernels(ks), whole);
    auto b = model::make_gpu_model(*m.checkpoint, g.with_kernels(ks), slow);
    const std::vector<float> la = a->logits(ids), lb = b->logits(ids);
    if (g.device.caps().type == VK_PHYSICAL_DEVICE_TYPE_CPU)
      CHECK(model::gpu_stats(*a).submits == 1);  // a CPU device splits only when asked
    CHECK(model::gpu_stats(*b).submits == 6);  // the head, over budget with a block, apart
    CHECK(la == lb);
    const vk::Device& d = g.with_kernels(ks);
    CHECK(model::gpu_submission_timeout(*a) == d.fence_timeout_s());
    const double expected = std::max(model::block_seconds(c, 8, 8, model::DType::F16, crawl),
                                      model::head_seconds(c, 8, model::DType::F16, crawl));
    REQUIRE(model::kTimeoutMargin * expected > d.fence_timeout_s());
    CHECK(model::gpu_submission_timeout(*b) == doctest::Approx(model::kTimeoutMargin * expected));
  }
  CHECK(model::submission_timeout(0.1, 20) == 20);
  CHECK(model::submission_timeout(100, 20) == 400);
}

TEST_CASE("submissions: a prompt whose block alone is over budget runs in chunks") {
  // The estimate: GPT-2 XL's 1024-token prompt at the default rates runs in chunks whose blocks
  // each fit the budget, whole tiles of 64 rows but the last; GPT-2 small's 128 tokens and any
  // decoded token in one pass; a bidirectional model's pass is never cut.
  model::Config xl = test::tiny_config();
  xl.n_embd = 1600, xl.n_head = 25, xl.n_inner = 6400, xl.n_layer = 48, xl.n_ctx = 1024;
  xl.n_vocab = 50257;
  const model::SubmissionRates rates;
  const std::vector<uint32_t> parts = model::prompt_chunks(xl, 1024, 0, model::DType::F16, rates);
  CAPTURE(parts.size());
  CHECK(parts.size() > 2);
  uint32_t done = 0;
  for (size_t i = 0; i < parts.size(); done += parts[i++]) {
    CHECK(model::block_seconds(xl, parts[i], done + parts[i], model::DType::F16, rates) <=
          rates.budget_s);
    if (i + 1 < parts.size()) CHECK(parts[i] % 64 == 0);
  }
  CHECK(done == 1024);
  CHECK(parts.front() >= parts.back());  // later chunks attend to more keys
  CHECK(model::prompt_chunks(xl, 1, 1023, model::DType::F16, rates) == std::vector<uint32_t>{1});
  model::Config small = xl;
  small.n_embd = 768, small.n_head = 12, small.n_inner = 3072, small.n_layer = 12;
  CHECK(model::prompt_chunks(small, 128, 0, model::DType::F16, rates) ==
        std::vector<uint32_t>{128});
  model::Config bidirectional = xl;
  bidirectional.causal = false;
  CHECK(model::prompt_chunks(bidirectional, 1024, 0, model::DType::F16, rates) ==
        std::vector<uint32_t>{1024});
  // Every row's logits: the head over a chunk's rows (50257 of them each) must fit too.
  for (uint32_t t : model::prompt_chunks(xl, 1024, 0, model::DType::F16, rates, true)) {
    CHECK(t <= parts.front());
    CHECK(model::head_seconds(xl, t, model::DType::F16, rates) <= rates.budget_s);
  }
  const model::SubmissionRates crawl{1e3, 1e3, 0.5};  // not even one token fits: one at a time
  CHECK(model::prompt_chunks(small, 5, 0, model::DType::F16, crawl) ==
        std::vector<uint32_t>(5, 1));

  // On the device: the same logits, residual taps, attention weights and best candidates as one
  // pass, from more submissions, and generation compiles nothing after prepare().
  GPU_TEST(g);
  model::Config c = test::tiny_config();
  c.n_layer = 3;
  test::TinyModel m(c);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 24; i++) ids.push_back((i * 37 + 11) % 256);
  // Slow enough that a block over more than ~5 tokens of 24 is over budget: chunks of several
  // tokens, each attending to the cache the earlier ones filled.
  model::SubmissionRates slow_rates{1e3, 1e3, 0};
  slow_rates.budget_s = model::block_seconds(c, 5, 24, model::DType::F16, slow_rates);
  const std::vector<uint32_t> cut = model::prompt_chunks(c, 24, 0, model::DType::F16, slow_rates);
  CAPTURE(cut.size());
  REQUIRE(cut.size() >= 4);
  REQUIRE(*std::max_element(cut.begin(), cut.end()) > 1);
  // The chunks' matmuls and attention reduce over the same values grouped differently (another
  // kernel for a 1-row chunk, online softmax over other key blocks): rounding of fp32 sums of
  // logits of magnitude ~1 (measured on lavapipe: at most 1e-5, the GPU kernel set only; the
  // CPU set gives the same bits), far below what a wrong cache row or position would change.
  const test::Tolerance tol{5e-5, 5e-5};
  for (auto [precision, ks] : test::precisions_and_kernel_sets()) {
    CAPTURE(test::kernels_name(ks));
    CAPTURE(std::string(model::precision_name(precision)));
    model::GpuModelOptions whole;
    whole.precision = precision;
    model::GpuModelOptions slow = whole;
    slow.rates = slow_rates;
    const vk::Device& d = g.with_kernels(ks);
    auto a = model::make_gpu_model(*m.checkpoint, d, whole);
    auto b = model::make_gpu_model(*m.checkpoint, d, slow);
    for (model::Model* x : {a.get(), b.get()}) {
      x->set_taps(true);
      x->set_attention_taps(true);
    }
    const std::vector<float> la = a->logits(ids), lb = b->logits(ids);
    CHECK(test::close("logits", lb, la, tol));
    CHECK(model::gpu_stats(*b).submits > cut.size());  // each chunk's blocks are cut too
    if (d.caps().type == VK_PHYSICAL_DEVICE_TYPE_CPU) CHECK(model::gpu_stats(*a).submits == 1);
    for (uint32_t i = 0; i < c.n_layer; i++) {
      CHECK(test::close("tap", b->taps()[i], a->taps()[i], tol));
      REQUIRE(b->attention_probs()[i].size() == a->attention_probs()[i].size());
      CHECK(test::close("attention", b->attention_probs()[i], a->attention_probs()[i], tol));
    }
    // After a cached start, the rest of a prompt in chunks; the best 5 of its last row.
    for (model::Model* x : {a.get(), b.get()}) {
      x->reset();
      x->set_taps(false);
      x->set_attention_taps(false);
      x->next(std::span(ids).first(3), 5);
    }
    const model::Candidates ca = a->next(std::span(ids).subspan(3), 5),
                            cb = b->next(std::span(ids).subspan(3), 5);
    CHECK(model::gpu_stats(*b).submits > 1);
    CHECK(ca.ids == cb.ids);
    CHECK(test::close("best logits", cb.logits, ca.logits, tol));

    // Generation through the chunks, on a device that has compiled nothing yet.
    test::LoweredGpu fresh(g, {}, ks);
    auto fb = model::make_gpu_model(*m.checkpoint, fresh.device, slow);
    model::GenerateOptions o;
    o.max_new = 4;
    o.stop_at_eos = false;
    o.sampling.temperature = 0;
    const model::GenerateResult rb = model::generate(*fb, ids, o, [](int32_t) {});
    CHECK(fresh.device.kernels().count() == rb.pipelines);
    a->reset();
    CHECK(model::generate(*a, ids, o, [](int32_t) {}).tokens == rb.tokens);
  }
}

// A process stopped (SIGSTOP, a user's Ctrl-Z) for longer than the fence timeout goes on when
// continued: the stop is not the GPU's time (Device::wait_for). Lavapipe's threads stop with the
// process, so a step stopped in its fence wait has work left after the wait's deadline; waited
// for in one piece, it ended the run as a hung GPU. Steps of ~0.5 s (8 x 128 on the shipped
// model; ~1.5 s on a loaded 2-core CI machine, well inside the timeout), an 8 s timeout, two stops
// of 10 s each.
TEST_CASE("a process stopped longer than the fence timeout goes on when continued") {
  const std::string kjv = (test::source_dir() / "models" / "kjv").string();
  test::Background run({"train", "--init", kjv + "/config.json", "--data", kjv + "/heldout.txt",
                        "--batch", "8", "--ctx", "128", "--steps", "25", "--bench"},
                       {{"GPT2VK_FENCE_TIMEOUT", "8"}});
  const auto pause = [](double s) {
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
  };
  pause(6);  // the pipelines, then steps
  for (int i = 0; i < 2; i++) {
    REQUIRE(::kill(run.pid(), SIGSTOP) == 0);
    pause(10);
    REQUIRE(::kill(run.pid(), SIGCONT) == 0);
    pause(1.3);
  }
  CHECK_MESSAGE(run.wait(300) == 0, run.err());
  CHECK(run.err().find("did not finish within") == std::string::npos);
  CHECK(run.out().find("tokens/s") != std::string::npos);
}
