// gpt2vk bench: prompt processing (pp) and token generation (tg) speed in tokens/s, the mean and
// standard deviation of repeated runs after a warm-up, in the manner of llama.cpp's llama-bench
// so the two can be read side by side. --profile then shows where a decoded token's GPU time goes
// and what each token costs the host (submissions, waits, descriptor writes, ...), from a second
// model instance with timestamps on: timestamps cost time (on lavapipe especially), so they stay
// out of the timed runs. An encoder (BERT) times whole sequences; an encoder-decoder (Marian, T5)
// its encoder over a source (enc<P>) and greedy decoding after one (tg<N> @ src<P>), in the same
// table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/encoder_session.h"
#include "apps/options.h"
#include "apps/seq2seq_session.h"
#include "apps/session.h"
#include "model/formats/checkpoint.h"
#include "model/forward/gpu_model.h"

namespace app {
namespace {

struct BenchArgs {
  ModelArgs model;
  std::vector<uint32_t> n_prompt = {128};  // a pp test for each; 0 skips
  std::vector<uint32_t> n_gen = {32};      // a tg test for each; 0 skips
  int repeats = 5;                         // timed runs per test, after one warm-up
  bool json = false;                       // stdout: a JSON array, one object per test
  bool profile = false;                    // then GPU time per op kind and per-token counters
  double bandwidth = 0;  // GB/s of the device's memory: the profile shows each op's fraction
  std::vector<uint32_t> parallel;  // tg tests again with N sequences decoding together
  std::vector<uint32_t> batch;     // an encoder's tests again with N sequences to a pass
};

using Clock = std::chrono::steady_clock;

// Never 0, so a rate is always finite (a JSON number).
double seconds_since(Clock::time_point t0) {
  return std::max(1e-9, std::chrono::duration<double>(Clock::now() - t0).count());
}

struct Test {
  std::string name;  // pp128, tg32, tg32 x8
  uint32_t n_prompt = 0, n_gen = 0;
  std::vector<double> samples;  // tokens/s of each timed run (all sequences together)
  uint32_t parallel = 0;  // sequences decoding together in the model's slots (0: next())
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// The sample standard deviation (n - 1), as llama-bench reports it; 0 for one run.
double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

// Fixed-seed random ids: a pass costs the same whatever tokens it sees, and every run sees the
// same.
std::vector<int32_t> random_ids(uint32_t n, uint32_t vocab) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

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

// One run of a test decoding n_gen tokens where it decodes (a warm-up: 1); its tokens/s.
using RunOnce = std::function<double(const Test&, uint32_t n_gen)>;

// Every test's warm-up, then `repeats` rounds that time each test once: a change in the load of
// a shared machine then falls on all the tests alike, not on whichever ran during it, which
// matters most for the ratios of --parallel.
void run_tests(std::vector<Test>& tests, int repeats, const RunOnce& once) {
  for (const Test& t : tests) {
    std::fprintf(stderr, "gpt2vk: %s: a warm-up\n", t.name.c_str());
    once(t, 1);
  }
  std::fprintf(stderr, "gpt2vk: %d timed rounds, each running every test once\n", repeats);
  for (int r = 0; r < repeats; r++)
    for (Test& t : tests) t.samples.push_back(once(t, t.n_gen));
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

// What the table and the JSON say about the model and where it ran.
struct Subject {
  std::string model, backend, device, precision;  // precision: the weights'
  uint64_t size = 0, params = 0;
  std::string kv_cache = "f32";
};

// Bytes of the weights as the model holds them: matrices at the chosen precision, LayerNorm
// parameters and biases in fp32 (as model/forward/gpu_model.cpp uploads them).
uint64_t weight_bytes(const model::Config& c, model::Precision p) {
  uint64_t bytes = 0;
  for (const model::ExpectedTensor& e : model::expected_tensors(c))
    bytes += e.elements() * (e.shape.size() == 2 && p == model::Precision::F16 ? 2 : 4);
  return bytes;
}

std::string folder_name(std::filesystem::path dir) {
  dir = dir.lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  return dir.filename().string();
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string human_bytes(uint64_t b) {
  const auto d = static_cast<double>(b);
  return d >= 1024.0 * 1024 * 1024 ? format("%.2f GiB", d / (1024.0 * 1024 * 1024))
                                   : format("%.2f MiB", d / (1024.0 * 1024));
}

std::string human_count(uint64_t n) {
  const auto d = static_cast<double>(n);
  return d >= 1e9   ? format("%.2f B", d / 1e9)
         : d >= 1e6 ? format("%.2f M", d / 1e6)
                    : format("%.2f K", d / 1e3);
}

// Display width: '±' is two bytes and one column.
size_t columns(const std::string& x) {
  size_t n = 0;
  for (char ch : x) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

// A Markdown table, as llama-bench prints: text left-aligned, numbers (right[i]) right-aligned.
void print_markdown(FILE* out, const std::vector<std::string>& head, const std::vector<bool>& right,
                    const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(head.size());
  for (size_t i = 0; i < head.size(); i++) {
    width[i] = columns(head[i]);
    for (const auto& r : rows) width[i] = std::max(width[i], columns(r[i]));
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string text = "|";
    for (size_t i = 0; i < r.size(); i++) {
      const std::string pad(width[i] - columns(r[i]), ' ');
      text += " " + (right[i] ? pad + r[i] : r[i] + pad) + " |";
    }
    std::fprintf(out, "%s\n", text.c_str());
  };
  line(head);
  std::string rule = "|";
  for (size_t i = 0; i < head.size(); i++)
    rule += right[i] ? " " + std::string(width[i] - 1, '-') + ": |"
                     : " " + std::string(width[i], '-') + " |";
  std::fprintf(out, "%s\n", rule.c_str());
  for (const auto& r : rows) line(r);
}

void print_table(const Subject& s, const std::vector<Test>& tests) {
  std::vector<std::vector<std::string>> rows;
  for (const Test& t : tests)
    rows.push_back({s.model, human_bytes(s.size), human_count(s.params), s.backend, s.device,
                    s.precision + (s.kv_cache == "f32" ? "" : ", KV " + s.kv_cache), t.name,
                    format("%.2f", mean(t.samples)) + " ± " + format("%.2f", stddev(t.samples))});
  print_markdown(stdout,
                 {"model", "size", "params", "backend", "device", "precision", "test", "t/s"},
                 {false, true, true, false, false, false, true, true}, rows);
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      out += format("\\u%04.0f", u);  // control characters; everything else is UTF-8 as is
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// One object per test, the field names of llama-bench's JSON where it has them.
void print_json(const Subject& s, const std::vector<Test>& tests) {
  std::printf("[\n");
  for (size_t i = 0; i < tests.size(); i++) {
    const Test& t = tests[i];
    std::string samples;
    for (size_t k = 0; k < t.samples.size(); k++)
      samples += (k ? ", " : "") + format("%.6g", t.samples[k]);
    std::printf(
        "  {\"model\": %s, \"backend\": %s, \"device\": %s, \"precision\": %s, "
        "\"kv_cache\": %s, \"size\": %llu, \"params\": %llu, \"test\": %s, \"n_prompt\": %u, \"n_gen\": %u, \"avg_ts\": %.6g, "
        "\"stddev_ts\": %.6g, \"samples_ts\": [%s]}%s\n",
        json_string(s.model).c_str(), json_string(s.backend).c_str(), json_string(s.device).c_str(),
        json_string(s.precision).c_str(), json_string(s.kv_cache).c_str(),
        static_cast<unsigned long long>(s.size),
        static_cast<unsigned long long>(s.params), json_string(t.name).c_str(), t.n_prompt, t.n_gen,
        mean(t.samples), stddev(t.samples), samples.c_str(), i + 1 < tests.size() ? "," : "");
  }
  std::printf("]\n");
}

// GPU time per op kind (shader) and the recorder's counters, summed over profiled passes.
struct Profile {
  struct Op {
    double ms = 0;       // all dispatches
    double longest = 0;  // the longest dispatch of each pass, summed (lm_head among matmuls)
    uint32_t dispatches = 0;
    uint64_t read_bytes = 0;  // of its read-only bindings (vk::DispatchTime::read_bytes)
  };
  std::map<std::string, Op> ops;
  vk::RecorderStats stats;
  uint32_t passes = 0;
  double wall_s = 0;

  void add(const model::Model& m, double seconds) {
    add(model::gpu_timings(m), model::gpu_stats(m), seconds);
  }
  // One pass made of several passes' dispatches (an encoder-decoder's source: the encoder's,
  // then the decoder's projections of its output): add(parts...) with the time of them all.
  void add(const std::vector<vk::DispatchTime>& timings, const vk::RecorderStats& st,
           double seconds) {
    std::map<std::string, double> longest;
    for (const vk::DispatchTime& d : timings) {
      ops[d.shader].ms += d.ms;
      ops[d.shader].dispatches++;
      // The embedding binds the whole table and gathers T rows of it, and attention binds the
      // whole caches and reads the rows up to the position it reads at run time: their bindings
      // say nothing about what they read, so they count no bytes.
      if (d.shader.rfind("embedding", 0) != 0 && d.shader.rfind("attention", 0) != 0)
        ops[d.shader].read_bytes += d.read_bytes;
      longest[d.shader] = std::max(longest[d.shader], d.ms);
    }
    for (const auto& [name, ms] : longest) ops[name].longest += ms;
    stats += st;
    passes++;
    wall_s += seconds;
  }
};

// bandwidth: GB/s, or 0. An op's bytes are those of its read-only bindings (the weights, x; none
// for the embedding and attention, Profile::add): at one row of x (decoding) a matmul's are its
// weights, which is what bounds it, so bytes / time against the device's bandwidth is its
// distance from the roofline.
void print_profile(FILE* out, const std::string& title, const Profile& p, const std::string& unit,
                   double bandwidth) {
  const double n = p.passes;
  std::vector<std::pair<std::string, Profile::Op>> ops(p.ops.begin(), p.ops.end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double total = 0, bytes = 0;
  for (const auto& [name, op] : ops) {
    total += op.ms;
    bytes += static_cast<double>(op.read_bytes);
  }
  // GB/s reached, and its fraction of `bandwidth`.
  const auto reached = [&](double b, double ms) {
    const double gbs = ms > 0 ? b / (ms * 1e-3) / 1e9 : 0;
    return std::vector<std::string>{format("%.3f", b / n / 1e6), format("%.3g", gbs),
                                    bandwidth > 0 ? format("%.1f%%", 100 * gbs / bandwidth) : "-"};
  };
  std::vector<std::vector<std::string>> rows;
  for (const auto& [name, op] : ops) {
    rows.push_back({name, format("%.4g", op.dispatches / n), format("%.3f", op.ms / n),
                    format("%.1f%%", total > 0 ? 100 * op.ms / total : 0),
                    format("%.3f", op.longest / n)});
    for (std::string& s : reached(static_cast<double>(op.read_bytes), op.ms)) rows.back().push_back(s);
  }
  rows.push_back({"all (GPU)", format("%.4g", p.stats.dispatches / n), format("%.3f", total / n),
                  "100.0%", ""});
  for (std::string& s : reached(bytes, total)) rows.back().push_back(s);
  rows.push_back({"wall, timestamps on", "", format("%.3f", 1e3 * p.wall_s / n), "", "", "", "", ""});
  std::fprintf(out, "\n%s\n\n", title.c_str());
  print_markdown(out,
                 {"op kind", "dispatches/" + unit, "ms/" + unit, "share", "longest ms",
                  "MB read/" + unit, "GB/s", "of bandwidth"},
                 {false, true, true, true, true, true, true, true}, rows);
  const vk::RecorderStats& st = p.stats;
  std::fprintf(out, "\n");
  print_markdown(out, {"counter", "per " + unit}, {false, true},
                 {{"submits", format("%.4g", st.submits / n)},
                  {"fence waits", format("%.4g", st.waits / n)},
                  {"replays of a recording", format("%.4g", st.replays / n)},
                  {"commands recorded", format("%.4g", st.commands / n)},
                  {"descriptor writes", format("%.4g", st.descriptor_writes / n)},
                  {"pipeline binds recorded", format("%.4g", st.pipeline_binds / n)},
                  {"barriers recorded", format("%.4g", st.barriers / n)},
                  {"dispatches run", format("%.4g", st.dispatches / n)}});
}

// Whether --profile asks for a profile this run can give: not on the CPU reference, which has
// no GPU timings (it says so).
bool profiling(const BenchArgs& args) {
  if (!args.profile) return false;
  if (args.model.device != "cpu") return true;
  std::fprintf(stderr,
               "gpt2vk: --profile needs a Vulkan device; the CPU reference has no GPU timings\n");
  return false;
}

// A profiled instance's options: timestamps on (and a note where the device has none).
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
    print_profile(out, "profile: decode of " + std::to_string(parallel) +
                           " sequences together, mean of " + std::to_string(gen - 1) + " passes" + where,
                  p, "pass", bandwidth);
  }
}

// N sequences of P made-up ids each, the same for every run.
std::vector<std::vector<int32_t>> encoder_ids(uint32_t n, uint32_t P, uint32_t n_vocab) {
  std::vector<std::vector<int32_t>> ids(n, std::vector<int32_t>(P));
  for (uint32_t b = 0; b < n; b++)
    for (uint32_t i = 0; i < P; i++)
      ids[b][i] = static_cast<int32_t>((i * 7919u + b * 104729u + 1000) % n_vocab);
  return ids;
}

std::vector<model::EncoderInput> encoder_inputs(const std::vector<std::vector<int32_t>>& ids) {
  std::vector<model::EncoderInput> inputs;
  for (const std::vector<int32_t>& one : ids) inputs.push_back({one, {}});
  return inputs;
}

// Where an encoder's time goes, on an instance of its own with timestamps on, warmed up first:
// the pass of one sequence of `prompt` tokens, and for each of `batches` the pass of that many
// (the last pass's op times where they take several; the counters are of them all, and the
// title says how many submissions there were).
void profile_encoder(const model::Checkpoint& ckpt, const vk::Device& device,
                     model::Precision precision, uint32_t split_layers, uint32_t prompt,
                     const std::vector<uint32_t>& batches, double bandwidth, FILE* out) {
  model::GpuModelOptions o = profiled(device, precision, split_layers, out);
  for (uint32_t n : batches) o.encoder_batch = std::max(o.encoder_batch, n);
  const std::unique_ptr<model::Encoder> e = model::make_gpu_encoder(ckpt, device, o);
  const std::string where = " on " + device.caps().name + ", " + model::precision_name(precision) +
                            "; GPU time from timestamp queries";
  std::vector<uint32_t> all{1};
  all.insert(all.end(), batches.begin(), batches.end());
  for (uint32_t n : all) {
    const std::vector<std::vector<int32_t>> ids = encoder_ids(n, prompt, e->config().n_vocab);
    const std::vector<model::EncoderInput> inputs = encoder_inputs(ids);
    e->encode_batch(inputs);  // warm-up
    const Clock::time_point t0 = Clock::now();
    e->encode_batch(inputs);
    const double seconds = seconds_since(t0);
    Profile p;
    const vk::RecorderStats& st = model::gpu_stats(*e);
    p.add(model::gpu_timings(*e), st, seconds);
    const std::string what = n == 1 ? "one sequence" : std::to_string(n) + " sequences";
    const std::string passes =
        st.submits > 1 ? ", " + std::to_string(st.submits) + " submissions (op times: the last pass's)"
                       : ", one pass";
    print_profile(out, "profile: encode of " + what + " of " + std::to_string(prompt) + " tokens" +
                           passes + where,
                  p, "pass", bandwidth);
  }
}

// An encoder's: for each --n-prompt P, one sequence of P tokens encoded whole (enc<P>), then
// for each --batch N, N sequences of P tokens in passes of N (enc<P> x<N>, what embed --batch N
// runs), hidden states only, after a warm-up: sequences/s and tokens/s, mean and spread.
// --profile then shows where the first P's passes spend their GPU time.
int bench_encoder(BenchArgs args) {
  for (uint32_t n : args.batch) args.model.encoder_batch = std::max(args.model.encoder_batch, n);
  EncoderSession s = open_encoder(args.model);
  const model::Config& c = s.checkpoint->config();
  std::vector<Test> tests;
  for (uint32_t P : args.n_prompt) {
    if (P == 0) continue;
    if (P > c.n_ctx)
      throw std::runtime_error("-p " + std::to_string(P) + ": the model takes at most " +
                               std::to_string(c.n_ctx) + " tokens (max_position_embeddings)");
    std::vector<uint32_t> batches{1};
    batches.insert(batches.end(), args.batch.begin(), args.batch.end());
    for (uint32_t n : batches) {
      Test t{"enc" + std::to_string(P) + (n > 1 ? " x" + std::to_string(n) : ""), P, 0, {}, 0};
      const std::vector<std::vector<int32_t>> ids = encoder_ids(n, P, c.n_vocab);
      const std::vector<model::EncoderInput> inputs = encoder_inputs(ids);
      s.encoder->encode_batch(inputs);  // warm-up: compiles its pipelines
      for (int r = 0; r < args.repeats; r++) {
        const Clock::time_point t0 = Clock::now();
        s.encoder->encode_batch(inputs);
        t.samples.push_back(static_cast<double>(n) * P / seconds_since(t0));
      }
      tests.push_back(t);
    }
  }
  if (tests.empty()) throw std::runtime_error("an encoder's bench needs -p with a length > 0");
  nlohmann::json all = nlohmann::json::array();
  if (!args.json)
    std::printf("%s, %s, %s weights\n%-12s %14s %14s\n", folder_name(s.checkpoint->dir()).c_str(),
                s.encoder->device_name().c_str(), model::precision_name(s.encoder->precision()),
                "test", "tokens/s", "sequences/s");
  for (const Test& t : tests) {
    const double tps = mean(t.samples);
    if (args.json)
      all.push_back({{"test", t.name}, {"n_prompt", t.n_prompt}, {"tokens_per_s", tps},
                     {"sequences_per_s", tps / t.n_prompt}, {"samples", t.samples},
                     {"device", s.encoder->device_name()}});
    else
      std::printf("%-12s %14.1f %14.2f\n", t.name.c_str(), tps, tps / t.n_prompt);
  }
  if (args.json) std::printf("%s\n", all.dump(2).c_str());
  std::fflush(stdout);

  if (!profiling(args)) return 0;
  s.encoder.reset();  // the profiled instance takes its place
  // With --json, stdout holds only the JSON.
  profile_encoder(*s.checkpoint, *s.device, model::parse_precision(args.model.precision),
                  args.model.split_layers, tests.front().n_prompt, args.batch, args.bandwidth,
                  args.json ? stderr : stdout);
  return 0;
}

// An encoder-decoder's: enc<P> times set_source over P random source ids (the encoder's pass
// and every decoder layer's projection of its output into cross-attention keys and values);
// tg<N> @ src<P> times N greedy decoder steps after such a source (set untimed), one token at a
// time from the start token, each feeding back its argmax, with no stop at eos.
double time_encode(model::Seq2Seq& m, const std::vector<int32_t>& source) {
  const Clock::time_point t0 = Clock::now();
  m.set_source(source);
  return seconds_since(t0);
}

double time_greedy(model::Seq2Seq& m, const std::vector<int32_t>& source, uint32_t n) {
  m.set_source(source);  // the decoder's cache empty
  int32_t id = m.config().decoder_start_token_id.value_or(0);
  const Clock::time_point t0 = Clock::now();
  for (uint32_t i = 0; i < n; i++) id = m.decoder().next({&id, 1}, 1).ids[0];
  return seconds_since(t0);
}

// enc<P> for each -p, then tg<N> @ src<P> for each -n after each -p (a source of one token
// where every -p is 0): n_prompt is the source's length, n_gen the decoder's steps.
std::vector<Test> plan_seq2seq_tests(const BenchArgs& args, const model::Config& c) {
  std::vector<uint32_t> sources;
  for (uint32_t p : args.n_prompt) {
    if (p == 0) continue;
    if (p > c.n_ctx)
      throw std::runtime_error("-p " + std::to_string(p) + ": a source longer than the model's " +
                               std::to_string(c.n_ctx) + " tokens");
    sources.push_back(p);
  }
  std::vector<Test> tests;
  for (uint32_t p : sources) tests.push_back({"enc" + std::to_string(p), p, 0, {}});
  if (sources.empty()) sources.push_back(1);
  for (uint32_t n : args.n_gen) {
    if (n == 0) continue;
    if (n > c.n_ctx)  // the start token and n - 1 generated ones in the decoder's cache
      throw std::runtime_error("-n " + std::to_string(n) + ": more decoder steps than its context of " +
                               std::to_string(c.n_ctx) + " tokens");
    for (uint32_t p : sources)
      tests.push_back({"tg" + std::to_string(n) + " @ src" + std::to_string(p), p, n, {}});
  }
  if (tests.empty()) throw std::runtime_error("nothing to run: -p and -n are both 0");
  return tests;
}

// Where an encoder-decoder's time goes, on an instance of its own with timestamps on, warmed
// up first: the source pass (the encoder's dispatches and the decoder's projections of its
// output, one pass) over `source` random ids, then the mean decoder step over `gen` greedy
// steps after it.
void profile_seq2seq(const model::Checkpoint& ckpt, const vk::Device& device,
                     model::Precision precision, uint32_t split_layers, uint32_t source,
                     uint32_t gen, double bandwidth, FILE* out) {
  std::unique_ptr<model::Seq2Seq> m =
      model::make_gpu_seq2seq(ckpt, device, profiled(device, precision, split_layers, out));
  const model::Config& c = m->config();
  const std::string where = " on " + device.caps().name + ", " + model::precision_name(precision) +
                            "; GPU time from timestamp queries";
  const std::vector<int32_t> ids = random_ids(std::max(source, 1u), c.n_vocab);
  time_greedy(*m, ids, 1);  // the warm-up: pipelines, and a decoder step
  if (source > 0) {
    const double seconds = time_encode(*m, ids);
    std::vector<vk::DispatchTime> timings = model::gpu_timings(m->encoder());
    for (const vk::DispatchTime& d : model::gpu_timings(m->decoder())) timings.push_back(d);
    vk::RecorderStats stats = model::gpu_stats(m->encoder());
    stats += model::gpu_stats(m->decoder());
    Profile p;
    p.add(timings, stats, seconds);
    print_profile(out,
                  "profile: the source pass of " + std::to_string(source) +
                      " tokens (the encoder, then the decoder's cross-attention keys and values)" +
                      where,
                  p, "pass", bandwidth);
  }
  if (gen > 0) {
    m->set_source(ids);
    model::Model& d = m->decoder();
    int32_t id = c.decoder_start_token_id.value_or(0);
    Profile p;
    for (uint32_t i = 0; i < gen; i++) {
      const Clock::time_point t0 = Clock::now();
      id = d.next({&id, 1}, 1).ids[0];
      p.add(d, seconds_since(t0));
    }
    print_profile(out,
                  "profile: decoder step, mean of " + std::to_string(gen) + " after a source of " +
                      std::to_string(ids.size()) + " tokens" + where,
                  p, "token", bandwidth);
  }
}

int bench_seq2seq(const BenchArgs& args) {
  if (!args.parallel.empty())
    throw std::runtime_error("--parallel: an encoder-decoder's bench decodes one sequence");
  if (args.model.kv_cache != "f32")
    throw std::runtime_error("--kv-cache " + args.model.kv_cache +
                             ": an encoder-decoder's caches are fp32");
  Seq2SeqSession s = open_seq2seq(args.model, false);
  const model::Config& c = s.checkpoint->config();
  std::vector<Test> tests = plan_seq2seq_tests(args, c);
  model::Model& decoder = s.model->decoder();
  const Subject subject{folder_name(s.checkpoint->dir()),
                        args.model.device == "cpu" ? "CPU" : "Vulkan",
                        decoder.device_name(),
                        model::precision_name(decoder.precision()),
                        weight_bytes(c, decoder.precision()),
                        model::parameter_count(c),
                        "f32"};
  run_tests(tests, args.repeats, [&](const Test& t, uint32_t n_gen) {
    const std::vector<int32_t> source = random_ids(t.n_prompt, c.n_vocab);
    if (t.n_gen == 0) return t.n_prompt / time_encode(*s.model, source);
    return n_gen / time_greedy(*s.model, source, n_gen);
  });
  if (args.json)
    print_json(subject, tests);
  else
    print_table(subject, tests);
  std::fflush(stdout);

  if (!profiling(args)) return 0;
  s.model.reset();  // the profiled instance takes its place
  uint32_t source = 0, gen = 0;
  for (const Test& t : tests) {
    if (!source && t.n_gen == 0) source = t.n_prompt;
    if (!gen) gen = t.n_gen;
  }
  profile_seq2seq(*s.checkpoint, *s.device, model::parse_precision(args.model.precision),
                  args.model.split_layers, source, gen, args.bandwidth,
                  args.json ? stderr : stdout);
  return 0;
}

int bench(const BenchArgs& args) {
  if (encoder_folder(args.model))
    return bench_encoder(args);
  if (!args.batch.empty())
    throw std::runtime_error("--batch is an encoder's (a BERT folder); a decoder's sequences "
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

Command add_bench(CLI::App& cli) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "bench", "prompt processing (pp) and generation (tg) speed in tokens/s, like llama-bench");
  add_model_options(*cmd, args->model);
  cmd->add_option("-p,--n-prompt", args->n_prompt,
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
  return {cmd, [args] { return bench(*args); }};
}

}  // namespace app
