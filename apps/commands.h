// The gpt2vk subcommands. Each returns the process exit code; errors are thrown as exceptions
// and reported by main().
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/session.h"

namespace app {

struct DevicesArgs {
  bool validation = false;
};
int devices(const DevicesArgs& args);

struct OpbenchArgs {
  std::string device;         // index or name; "" = the first GPU
  std::string precision = "f16";
  int repeats = 10;
  uint32_t prefill = 128;     // tokens of the prefill shapes (decode attends to this many)
  std::string only;           // time only the ops whose name contains this
  std::string kernels;         // auto | gpu | cpu; "" = GPT2VK_KERNELS, else auto
};
int opbench(const OpbenchArgs& args);

struct BenchArgs {
  ModelArgs model;
  std::vector<uint32_t> n_prompt = {128};  // a pp test for each; 0 skips
  std::vector<uint32_t> n_gen = {32};      // a tg test for each; 0 skips
  int repeats = 5;                         // timed runs per test, after one warm-up
  bool json = false;                       // stdout: a JSON array, one object per test
  bool profile = false;                    // then GPU time per op kind and per-token counters
  double bandwidth = 0;  // GB/s of the device's memory: the profile shows each op's fraction
  std::vector<uint32_t> parallel;  // tg tests again with N sequences decoding together
};
int bench(const BenchArgs& args);

struct TokenizeArgs {
  ModelArgs model;
  std::string prompt, file, out;  // --prompt or --file; --out writes int32 little-endian
};
int tokenize(const TokenizeArgs& args);

struct GenerateArgs {
  ModelArgs model;
  std::string prompt, file;
  uint32_t n = 64;
  float temp = 0.8f;
  uint32_t top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  bool seed_given = false;
};
int generate(const GenerateArgs& args);

struct CompareArgs {
  ModelArgs model;
  std::string prompt, file;
  // Relative to the row's largest |logit| (see apps/compare.cpp); 0: 1e-4, or 2e-3 with
  // --kv-cache f16.
  double tolerance = 0;
};
int compare(const CompareArgs& args);

struct LogitsArgs {
  ModelArgs model;
  std::string ids, out;
};
int logits(const LogitsArgs& args);

struct PerplexityArgs {
  ModelArgs model;
  std::string file;
  uint32_t ctx = 0;  // 0: the model's n_ctx
};
int perplexity(const PerplexityArgs& args);

struct AttentionArgs {
  ModelArgs model;
  std::string prompt, file;
  std::string out;                // the HTML page
  std::string json;               // the weights and tokens as JSON
  std::optional<uint32_t> layer;  // only this layer (the terminal view: default 0)
  std::optional<uint32_t> head;   // only this head (the terminal view: default 0)
};
int attention(const AttentionArgs& args);

struct ServeArgs {
  ModelArgs model;
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  uint16_t port = 8080;             // 0: any free port (the line on stderr names it)
  uint32_t parallel = 1;            // requests decoding at once
  uint32_t ctx_per_slot = 0;        // tokens of prompt + completion per request; 0: n_ctx
  std::string api_key;              // "": no key needed
  uint32_t max_queue = 16;          // requests waiting beyond this get 503 + Retry-After
  size_t max_body = 1 << 20;        // bytes of a request body
  uint32_t request_timeout = 10;    // seconds for a request's headers, and again for its body
  uint32_t drain_timeout = 30;      // seconds SIGTERM waits for requests in flight
  uint32_t max_connections = 512;   // connections served at once (a thread each)
};
int serve(const ServeArgs& args);

struct TrainArgs {
  ModelArgs model;   // -m (a checkpoint to continue), --device, --kernels, --validation
  std::string init;  // --init CONFIG.json: a new model with GPT-2's initialisation
  std::string data, val_data, out, resume, log;
  uint64_t steps = 1000;  // the run's total, counting the steps before a resume
  uint32_t batch = 4, ctx = 64;
  std::string optimizer = "adamw";  // adamw | sgd
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  float grad_clip = 1.0f;  // 0: no clipping
  uint64_t warmup = 0;
  bool cosine = false;
  float lr_min = 0.0f;
  uint64_t eval_every = 0, save_every = 0;
  uint64_t seed = 1;
  bool profile = false;  // then GPU time per op of the last step
  // Time the steps only: no output folder, no checkpoint, no evaluation; print tokens/s (the
  // median step after the first, whose time includes building the pipelines).
  bool bench = false;
};
int train(const TrainArgs& args);

struct MakeModelArgs {
  std::string shape = "small";  // tiny | small | medium | large | xl
  std::string dtype = "f16";    // f32 | f16 | bf16
  std::string out;
  uint64_t seed = 1;
};
int make_model(const MakeModelArgs& args);

// A whole file's bytes; throws "<file>: cannot open".
std::string read_file(const std::string& file);

// The text of --prompt or --file (exactly one must be given), checked to be valid UTF-8.
std::string read_text(const std::string& prompt, const std::string& file);

}  // namespace app
