#include "model/generation/generate.h"

#include <chrono>
#include <stdexcept>

namespace model {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void check_prompt(const Config& c, size_t tokens, uint32_t context) {
  if (context > c.n_ctx)
    throw std::runtime_error("a context of " + std::to_string(context) +
                             " tokens was asked for, longer than the model's " +
                             std::to_string(c.n_ctx));
  if (tokens == 0) throw std::runtime_error("the prompt is empty: nothing to continue");
  if (tokens > c.n_ctx)
    throw std::runtime_error("the prompt is " + std::to_string(tokens) +
                             " tokens, longer than the model's context of " +
                             std::to_string(c.n_ctx) + " tokens");
  if (context > 0 && tokens > context)
    throw std::runtime_error("the prompt is " + std::to_string(tokens) +
                             " tokens, longer than the context of " + std::to_string(context) +
                             " tokens asked for (the model's is " + std::to_string(c.n_ctx) + ")");
}

GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token,
                        const std::function<void(const std::string&)>& on_note) {
  const Config& c = model.config();
  check_prompt(c, prompt.size(), o.context);
  const uint32_t window = o.context ? o.context : c.n_ctx;
  Sampler sampler(o.sampling);
  const uint32_t k = sampler.candidates(c.n_vocab);
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  GenerateResult r;
  r.stop = "length";

  model.reset();
  auto t0 = std::chrono::steady_clock::now();
  r.pipelines =
      model.prepare(static_cast<uint32_t>(prompt.size()), o.max_new, k, window, o.on_compile);
  r.compile_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  Candidates cand = model.next(seq, k);
  r.prompt_seconds = seconds_since(t0);
  r.forward_passes = 1;
  t0 = std::chrono::steady_clock::now();
  while (r.tokens.size() < o.max_new) {
    if (o.interrupted && o.interrupted()) {
      r.stop = "interrupted";
      break;
    }
    // llama.cpp's penalty window: the last repeat_last_n of prompt and text, one span for all
    // three penalties (-1: the last `window`, its context).
    const std::span<const int32_t> recent = sampler.recent(seq, window);
    const int32_t id = sampler.pick(cand, {recent, recent});
    if (o.stop_at_eos && c.eos_token_id && id == *c.eos_token_id) {
      r.stop = "eos";
      break;
    }
    r.tokens.push_back(id);
    seq.push_back(id);
    on_token(id);
    if (o.stopped && o.stopped()) {
      r.stop = "stop string";
      break;
    }
    if (r.tokens.size() == o.max_new) break;
    if (!c.causal) {
      // No cache for a bidirectional model: the (cropped) sequence again, every step.
      const size_t keep = std::min<size_t>(seq.size(), window);
      if (seq.size() == size_t(window) + 1 && on_note)
        on_note("context full (" + std::to_string(window) +
                " tokens): each step now reads only the last " + std::to_string(keep) + " tokens");
      model.reset();
      cand = model.next(std::span(seq).last(keep), k);
    } else if (model.length() == window) {
      const size_t keep = std::max<size_t>(1, window / 2);
      if (on_note)
        on_note("context full (" + std::to_string(window) +
                " tokens): sliding the window to the last " + std::to_string(keep) +
                " tokens and recomputing them");
      model.reset();
      cand = model.next(std::span(seq).last(keep), k);
      r.slides++;
    } else {
      cand = model.next(std::span(&seq.back(), 1), k);
    }
    r.forward_passes++;
  }
  r.generate_seconds = seconds_since(t0);
  return r;
}

}  // namespace model
