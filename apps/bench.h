// gpt2vk bench's parts: apps/bench.cpp runs a decoder's tests and holds the command,
// apps/bench_encoders.cpp an encoder's and an encoder-decoder's, apps/bench_report.cpp prints
// the tables, the JSON and the profiles.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "apps/session.h"
#include "model/forward/gpu_model.h"

namespace app::bench {

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
double seconds_since(Clock::time_point t0);

struct Test {
  std::string name;  // pp128, tg32, tg32 x8
  uint32_t n_prompt = 0, n_gen = 0;
  std::vector<double> samples;  // tokens/s of each timed run (all sequences together)
  uint32_t parallel = 0;        // sequences decoding together in the model's slots (0: next())
};
double mean(const std::vector<double>& v);
// The sample standard deviation (n - 1), as llama-bench reports it; 0 for one run.
double stddev(const std::vector<double>& v);

// Fixed-seed random ids: a pass costs the same whatever tokens it sees, and every run sees the
// same.
std::vector<int32_t> random_ids(uint32_t n, uint32_t vocab);

// One run of a test decoding n_gen tokens where it decodes (a warm-up: 1); its tokens/s.
using RunOnce = std::function<double(const Test&, uint32_t n_gen)>;

// Every test's warm-up, then `repeats` rounds that time each test once: a change in the load of
// a shared machine then falls on all the tests alike, not on whichever ran during it, which
// matters most for the ratios of --parallel.
void run_tests(std::vector<Test>& tests, int repeats, const RunOnce& once);

// What the table and the JSON say about the model and where it ran.
struct Subject {
  std::string model, backend, device, precision;  // precision: the weights'
  uint64_t size = 0, params = 0;
  std::string kv_cache = "f32";
};

// Bytes of the weights as the model holds them: matrices at the chosen precision, LayerNorm
// parameters and biases in fp32 (as model/forward/gpu_model.cpp uploads them).
uint64_t weight_bytes(const model::Config& c, model::Precision p);
std::string folder_name(std::filesystem::path dir);

// llama-bench's table, and its JSON: one object per test, its field names where it has them.
void print_table(const Subject& s, const std::vector<Test>& tests);
void print_json(const Subject& s, const std::vector<Test>& tests);

// GPU time per op kind (shader) and the recorder's counters, summed over profiled passes.
struct Profile {
  struct Op {
    double ms = 0;       // all dispatches
    double longest = 0;  // the longest dispatch of each pass, summed (lm_head among matmuls)
    uint32_t dispatches = 0;
    uint64_t read_bytes = 0;  // of its read-only bindings (vk::DispatchTime::read_bytes)
    double flops = 0;         // as the ops count them (vk::DispatchTime::flops)
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
           double seconds);
};

// bandwidth: GB/s, or 0. An op's bytes are those of its read-only bindings (the weights, x; none
// for the embedding and attention, Profile::add): at one row of x (decoding) a matmul's are its
// weights, which is what bounds it, so bytes / time against the device's bandwidth is its
// distance from the roofline. Its FLOPs are what the matmuls and a prompt's attention count
// (vk::Recorder::set_flops): GFLOP/s against the device's peak is the other roofline, a
// prompt's.
void print_profile(FILE* out, const std::string& title, const Profile& p, const std::string& unit,
                   double bandwidth);

// Whether --profile asks for a profile this run can give: not on the CPU reference, which has
// no GPU timings (it says so).
bool profiling(const BenchArgs& args);
// A profiled instance's options: timestamps on (and a note where the device has none).
model::GpuModelOptions profiled(const vk::Device& device, model::Precision precision,
                                uint32_t split_layers, FILE* out);

// An encoder's tests (enc<P>, enc<P> x<N>) and an encoder-decoder's (enc<P>, tg<N> @ src<P>),
// each with its --profile: apps/bench_encoders.cpp.
int bench_encoder(BenchArgs args);
int bench_seq2seq(const BenchArgs& args);

}  // namespace app::bench
