#include "model/generation/generate.h"

#include <chrono>
#include <stdexcept>

namespace model {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void check_prompt(const Config& c, size_t tokens) {
  if (tokens == 0) throw std::runtime_error("the prompt is empty: nothing to continue");
  if (tokens > c.n_ctx)
    throw std::runtime_error("the prompt is " + std::to_string(tokens) +
                             " tokens, longer than the model's context of " +
                             std::to_string(c.n_ctx) + " tokens");
}

GenerateResult generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token,
                        const std::function<void(const std::string&)>& on_note) {
  const Config& c = model.config();
  check_prompt(c, prompt.size());
  Sampler sampler(o.sampling);
  const uint32_t k = sampler.candidates(c.n_vocab);
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  GenerateResult r;
  r.stop = "length";

  model.reset();
  auto t0 = std::chrono::steady_clock::now();
  r.pipelines = model.prepare(static_cast<uint32_t>(prompt.size()), o.max_new, k, o.on_compile);
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
    const int32_t id = sampler.pick(cand);
    if (o.stop_at_eos && c.eos_token_id && id == *c.eos_token_id) {
      r.stop = "eos";
      break;
    }
    r.tokens.push_back(id);
    seq.push_back(id);
    on_token(id);
    if (r.tokens.size() == o.max_new) break;
    if (!c.causal) {
      // No cache for a bidirectional model: the (cropped) sequence again, every step.
      const size_t keep = std::min<size_t>(seq.size(), c.n_ctx);
      if (seq.size() == size_t(c.n_ctx) + 1 && on_note)
        on_note("context full (" + std::to_string(c.n_ctx) +
                " tokens): each step now reads only the last " + std::to_string(keep) + " tokens");
      model.reset();
      cand = model.next(std::span(seq).last(keep), k);
    } else if (model.length() == c.n_ctx) {
      const size_t keep = std::max<size_t>(1, c.n_ctx / 2);
      if (on_note)
        on_note("context full (" + std::to_string(c.n_ctx) + " tokens): sliding the window to the last " +
                std::to_string(keep) + " tokens and recomputing them");
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
