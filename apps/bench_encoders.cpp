// gpt2vk bench on an encoder (BERT): whole sequences, alone and in batches; and on an
// encoder-decoder (Marian, T5): its encoder over a source and greedy decoding after one.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/bench.h"
#include "apps/encoder_session.h"
#include "apps/seq2seq_session.h"
#include "model/formats/checkpoint.h"
#include "model/forward/encoder.h"
#include "model/forward/seq2seq.h"

namespace app::bench {
namespace {

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
    const std::string passes = st.submits > 1 ? ", " + std::to_string(st.submits) +
                                                    " submissions (op times: the last pass's)"
                                              : ", one pass";
    print_profile(
        out,
        "profile: encode of " + what + " of " + std::to_string(prompt) + " tokens" + passes + where,
        p, "pass", bandwidth);
  }
}
}  // namespace

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
      all.push_back({{"test", t.name},
                     {"n_prompt", t.n_prompt},
                     {"tokens_per_s", tps},
                     {"sequences_per_s", tps / t.n_prompt},
                     {"samples", t.samples},
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
namespace {

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
      throw std::runtime_error("-n " + std::to_string(n) +
                               ": more decoder steps than its context of " +
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
}  // namespace

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
}  // namespace app::bench
