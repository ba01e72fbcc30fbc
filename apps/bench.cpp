// gpt2vk bench: prompt processing (pp) and token generation (tg) speed in tokens/s, the mean and
// standard deviation of repeated runs after a warm-up, in the manner of llama.cpp's llama-bench
// so the two can be read side by side. --profile then shows where a decoded token's GPU time goes
// and what each token costs the host (submissions, waits, descriptor writes, ...), from a second
// model instance with timestamps on: timestamps cost time (on lavapipe especially), so they stay
// out of the timed runs. An encoder (BERT) times whole sequences; an encoder-decoder (Marian, T5)
// its encoder over a source (enc<P>) and greedy decoding after one (tg<N> @ src<P>), in the same
// table (apps/bench_encoders.cpp); apps/bench_report.cpp prints.
#include "apps/bench.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/encoder_session.h"
#include "apps/options.h"
#include "apps/seq2seq_session.h"
#include "apps/session.h"
#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"

namespace app {
namespace bench {

double seconds_since(Clock::time_point t0) {
  return std::max(1e-9, std::chrono::duration<double>(Clock::now() - t0).count());
}

std::vector<int32_t> random_ids(uint32_t n, uint32_t vocab) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

void run_tests(std::vector<Test>& tests, int repeats, const RunOnce& once) {
  for (const Test& t : tests) {
    std::fprintf(stderr, "gpt2vk: %s: a warm-up\n", t.name.c_str());
    once(t, 1);
  }
  std::fprintf(stderr, "gpt2vk: %d timed rounds, each running every test once\n", repeats);
  for (int r = 0; r < repeats; r++)
    for (Test& t : tests) t.samples.push_back(once(t, t.n_gen));
}

bool profiling(const BenchArgs& args) {
  if (!args.profile) return false;
  if (args.model.device != "cpu") return true;
  std::fprintf(stderr,
               "gpt2vk: --profile needs a Vulkan device; the CPU reference has no GPU timings\n");
  return false;
}

model::GpuModelOptions profiled(const vk::Device& device, model::Precision precision,
                                uint32_t split_layers, FILE* out) {
  if (!device.caps().timestamps)
    std::fprintf(out, "\n'%s' has no compute timestamps: the op times are missing\n",
                 device.caps().name.c_str());
  model::GpuModelOptions o;
  o.precision = precision;
  o.timestamps = true;
  o.split_layers = split_layers;
  return o;
}

namespace {

// One pass over the prompt from an empty cache, reading back the top-1 as generation does.
double time_prefill(model::Model& m, const std::vector<int32_t>& ids) {
  m.reset();
  const Clock::time_point t0 = Clock::now();
  m.next(ids, 1);
  return seconds_since(t0);
}

// One token of prompt (not timed), then n greedy decode steps, each feeding back the id it chose.
double time_decode(model::Model& m, int32_t first, uint32_t n) {
  m.reset();
  int32_t id = m.next({&first, 1}, 1).ids[0];
  const Clock::time_point t0 = Clock::now();
  for (uint32_t i = 0; i < n; i++) id = m.next({&id, 1}, 1).ids[0];
  return seconds_since(t0);
}

int32_t first_token(const model::Config& c) {
  return c.eos_token_id ? static_cast<int32_t>(*c.eos_token_id) : 0;  // GPT-2's <|endoftext|>
}

// Slots 0 .. seqs-1 emptied and given one token of prompt, as rows for Model::slot_decode
// holding that token.
std::vector<model::Model::SlotToken> start_slots(model::Model& m, int32_t first, uint32_t seqs) {
  std::vector<model::Model::SlotToken> rows;
  for (uint32_t s = 0; s < seqs; s++) {
    m.slot_reset(s);
    m.slot_prefill(s, {&first, 1}, false);
    rows.push_back({s, first});
  }
  return rows;
}

// Each row's next id: the greedy choice of its row of `logits` ([rows, V]).
void feed_back(std::vector<model::Model::SlotToken>& rows, const std::vector<float>& logits,
               size_t V) {
  for (size_t b = 0; b < rows.size(); b++) {
    const auto row = logits.begin() + long(b * V);
    rows[b].id = static_cast<int32_t>(std::max_element(row, row + long(V)) - row);
  }
}

// What gpt2vk serve --parallel does: `seqs` sequences in slots 0.., one token of prompt each
// (not timed), then n steps that decode a token for every one in one pass (Model::slot_decode),
// each feeding back its greedy choice.
double time_decode_slots(model::Model& m, int32_t first, uint32_t n, uint32_t seqs) {
  std::vector<model::Model::SlotToken> rows = start_slots(m, first, seqs);
  const Clock::time_point t0 = Clock::now();
  for (uint32_t i = 0; i < n; i++) feed_back(rows, m.slot_decode(rows), m.config().n_vocab);
  return seconds_since(t0);
}

// One run of the test, decoding n_gen tokens where it decodes; its tokens/s (all sequences
// together). A warm-up run (n_gen 1) creates the pipelines and descriptor pools the timed runs
// reuse.
double run_once(model::Model& m, const Test& t, uint32_t n_gen) {
  const model::Config& c = m.config();
  if (t.n_prompt > 0) return t.n_prompt / time_prefill(m, random_ids(t.n_prompt, c.n_vocab));
  if (t.parallel > 0)
    return double(n_gen) * t.parallel / time_decode_slots(m, first_token(c), n_gen, t.parallel);
  return n_gen / time_decode(m, first_token(c), n_gen);
}
std::vector<Test> plan_tests(const BenchArgs& args, const model::Config& c) {
  std::vector<Test> tests;
  for (uint32_t p : args.n_prompt) {
    if (p == 0) continue;
    if (p > c.n_ctx)
      throw std::runtime_error("-p " + std::to_string(p) + ": longer than the model's context of " +
                               std::to_string(c.n_ctx) + " tokens");
    tests.push_back({"pp" + std::to_string(p), p, 0, {}});
  }
  for (uint32_t n : args.n_gen) {
    if (n == 0) continue;
    if (n + 1 > c.n_ctx)  // one token of prompt, then n
      throw std::runtime_error("-n " + std::to_string(n) + ": one token of prompt and " +
                               std::to_string(n) + " more pass the model's context of " +
                               std::to_string(c.n_ctx) + " tokens");
    tests.push_back({"tg" + std::to_string(n), 0, n, {}});
    for (uint32_t seqs : args.parallel)
      tests.push_back({"tg" + std::to_string(n) + " x" + std::to_string(seqs), 0, n, {}, seqs});
  }
  if (tests.empty()) throw std::runtime_error("nothing to run: -p and -n are both 0");
  return tests;
}
// Where the time of a prefill pass and of a decoded token goes, on a model instance of its own
// with timestamps on, warmed up first like the timed runs.
void profile(const model::Checkpoint& ckpt, const vk::Device& device, model::Precision precision,
             model::Precision kv_cache, uint32_t split_layers, uint32_t prompt, uint32_t gen,
             uint32_t parallel, double bandwidth, FILE* out) {
  model::GpuModelOptions o = profiled(device, precision, split_layers, out);
  o.kv_cache = kv_cache;
  if (parallel > 1) {
    o.slots = parallel;
    o.slot_context = std::max({prompt, gen + 1, 1u});
  }
  std::unique_ptr<model::Model> m = model::make_gpu_model(ckpt, device, o);
  const int32_t first = first_token(m->config());
  time_decode(*m, first, 1);
  const std::string where = " on " + device.caps().name + ", " + model::precision_name(precision) +
                            (kv_cache == model::Precision::F16 ? ", fp16 KV cache" : "") +
                            "; GPU time from timestamp queries";
  if (prompt > 0) {
    const std::vector<int32_t> ids = random_ids(prompt, m->config().n_vocab);
    time_prefill(*m, ids);
    Profile p;
    p.add(*m, time_prefill(*m, ids));
    print_profile(out,
                  "profile: prefill of " + std::to_string(prompt) + " tokens, one pass" + where, p,
                  "pass", bandwidth);
  }
  if (gen > 0) {
    Profile p;
    m->reset();
    int32_t id = m->next({&first, 1}, 1).ids[0];
    for (uint32_t i = 0; i < gen; i++) {
      const Clock::time_point t0 = Clock::now();
      id = m->next({&id, 1}, 1).ids[0];
      p.add(*m, seconds_since(t0));
    }
    print_profile(out, "profile: decode, mean of " + std::to_string(gen) + " tokens" + where, p,
                  "token", bandwidth);
  }
  if (gen > 0 && parallel > 1) {  // one pass decoding a token for each of `parallel` sequences
    std::vector<model::Model::SlotToken> rows = start_slots(*m, first, parallel);
    m->slot_decode(rows);  // warm-up
    Profile p;
    for (uint32_t i = 1; i < gen; i++) {
      const Clock::time_point t0 = Clock::now();
      const std::vector<float> l = m->slot_decode(rows);
      p.add(*m, seconds_since(t0));
      feed_back(rows, l, m->config().n_vocab);
    }
    print_profile(out,
                  "profile: decode of " + std::to_string(parallel) +
                      " sequences together, mean of " + std::to_string(gen - 1) + " passes" + where,
                  p, "pass", bandwidth);
  }
}
int run(const BenchArgs& args) {
  if (encoder_folder(args.model)) return bench_encoder(args);
  if (!args.batch.empty())
    throw std::runtime_error(
        "--batch is an encoder's (a BERT folder); a decoder's sequences "
        "decode together with --parallel");
  if (seq2seq_folder(args.model)) return bench_seq2seq(args);
  ModelArgs margs = args.model;
  if (!args.parallel.empty()) {
    // A slot per sequence, as long as the longest test needs (slot 0 also runs the others).
    margs.slots = *std::max_element(args.parallel.begin(), args.parallel.end());
    uint32_t need = 1;
    for (uint32_t p : args.n_prompt) need = std::max(need, p);
    for (uint32_t n : args.n_gen) need = std::max(need, n + 1);
    margs.slot_context = need;
  }
  Session s = open_checkpoint(margs);
  open_model(s, margs);
  const model::Config& c = s.model->config();
  std::vector<Test> tests = plan_tests(args, c);
  const bool cpu = args.model.device == "cpu";
  const Subject subject{folder_name(s.checkpoint->dir()),
                        cpu ? "CPU" : "Vulkan",
                        s.model->device_name(),
                        model::precision_name(s.model->precision()),
                        weight_bytes(c, s.model->precision()),
                        model::parameter_count(c),
                        args.model.kv_cache};
  run_tests(tests, args.repeats,
            [&](const Test& t, uint32_t n_gen) { return run_once(*s.model, t, n_gen); });
  if (!args.parallel.empty()) {
    // The aggregate of N sequences against one decoded the usual way (tgN).
    for (const Test& t : tests)
      for (const Test& one : tests)
        if (t.parallel > 0 && one.parallel == 0 && one.n_gen == t.n_gen && one.n_prompt == 0)
          std::fprintf(stderr, "gpt2vk: %s: %.2fx the aggregate tokens/s of %s\n", t.name.c_str(),
                       mean(t.samples) / mean(one.samples), one.name.c_str());
  }
  if (args.json)
    print_json(subject, tests);
  else
    print_table(subject, tests);
  std::fflush(stdout);

  if (!profiling(args)) return 0;
  s.model.reset();  // the profiled instance takes its place, so memory holds one model at a time
  uint32_t prompt = 0, gen = 0;
  for (const Test& t : tests) {
    if (!prompt) prompt = t.n_prompt;
    if (!gen) gen = t.n_gen;
  }
  // With --json, stdout holds only the JSON.
  const uint32_t parallel =
      args.parallel.empty() ? 0 : *std::max_element(args.parallel.begin(), args.parallel.end());
  profile(*s.checkpoint, *s.device, model::parse_precision(args.model.precision),
          model::parse_precision(args.model.kv_cache), args.model.split_layers, prompt, gen,
          parallel, args.bandwidth, args.json ? stderr : stdout);
  return 0;
}
}  // namespace
}  // namespace bench

Command add_bench(CLI::App& cli) {
  auto args = std::make_shared<bench::BenchArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "bench", "prompt processing (pp) and generation (tg) speed in tokens/s, like llama-bench");
  add_model_options(*cmd, args->model);
  cmd->add_option(
         "-p,--n-prompt", args->n_prompt,
         "prompt tokens of a pp test (an encoder-decoder: source tokens); a comma list runs "
         "several; 0 skips (default 128)")
      ->delimiter(',')
      ->check(whole_number(0, 1u << 20));
  cmd->add_option("-n,--n-gen", args->n_gen,
                  "tokens of a tg test (an encoder-decoder: greedy steps after each -p source); a "
                  "comma list runs several; 0 skips (default 32)")
      ->delimiter(',')
      ->check(whole_number(0, 1u << 20));
  cmd->add_option("-r,--repetitions", args->repeats,
                  "timed runs per test after a warm-up (default 5)")
      ->check(whole_number(1, 1000));
  cmd->add_flag("--json", args->json,
                "print a JSON array, one object per test, instead of the table");
  cmd->add_flag("--profile", args->profile,
                "then GPU time per op kind (timestamps) and per-token submits, waits, descriptor "
                "writes, binds, dispatches, barriers, on a second model instance");
  cmd->add_option("--bandwidth", args->bandwidth,
                  "the device's memory bandwidth in GB/s (its data sheet's figure): --profile "
                  "then shows the fraction of it each op and the whole token reach")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", args->batch,
                  "an encoder's: each test again with N sequences to a pass (embed --batch N), "
                  "aggregate tokens/s; a comma list runs several")
      ->delimiter(',')
      ->check(whole_number(2, 1024));
  cmd->add_option("--parallel", args->parallel,
                  "each tg test again with N sequences decoding together (gpt2vk serve "
                  "--parallel N), aggregate tokens/s; a comma list runs several")
      ->delimiter(',')
      ->check(whole_number(1, 8));
  return {cmd, [args] { return bench::run(*args); }};
}

}  // namespace app
