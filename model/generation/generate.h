// The generation loop: prefill the prompt, then one forward pass per new token, sliding the
// window when the context fills.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/forward/model.h"
#include "model/generation/sampler.h"

namespace model {

struct GenerateOptions {
  uint32_t max_new = 64;  // -n
  // The window: at most this many tokens are run together, and it slides at this length as it
  // does at n_ctx (-c). 0: the model's n_ctx; otherwise 1..n_ctx.
  uint32_t context = 0;
  // The penalties count the last repeat_last_n tokens of prompt and text (-1: the window's).
  SamplerOptions sampling;
  bool stop_at_eos = true;  // stop at the config's eos_token_id (<|endoftext|>)
  // Pipelines compiled before the prompt's pass (Model::prepare): done of total.
  std::function<void(size_t done, size_t total)> on_compile;
  // Asked before each token is chosen: true ends the run there (stop "interrupted"), with what
  // was generated so far. A pass in flight finishes first.
  std::function<bool()> interrupted;
  // Asked after each token went to on_token: true ends the run there (stop "stop string"), as
  // when the text it completes holds a stop string.
  std::function<bool()> stopped;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // the generated ids, without the prompt
  size_t pipelines = 0;         // compiled before the prompt's pass (Model::prepare)
  double compile_seconds = 0;   // that compile
  double prompt_seconds = 0;    // the prefill
  double generate_seconds = 0;  // every later forward pass
  uint32_t forward_passes = 0;
  uint32_t slides = 0;          // times the window slid (the context was full)
  std::string stop;             // "eos", "length", "interrupted" or "stop string"
};

// Throws unless a prompt of `tokens` tokens can run: not empty, not longer than n_ctx, nor
// than a shorter `context` (GenerateOptions::context; 0: n_ctx), which must be 0..n_ctx.
void check_prompt(const Config& config, size_t tokens, uint32_t context = 0);

// on_token: each new id as it is chosen. on_note: one line for stderr (a window slide).
// A prompt longer than the window (n_ctx, or o.context) is refused. When the sequence fills the
// window, it slides: the last half of it is run again from position 0 and generation goes on,
// as GPT-2's own sampling scripts crop their input. A bidirectional model re-reads its whole
// (cropped) sequence every step: its earlier outputs depend on later tokens, so no cache applies;
// a note says when the crop begins. So max_new may pass n_ctx for every model.
GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token,
                        const std::function<void(const std::string&)>& on_note = {});

}  // namespace model
