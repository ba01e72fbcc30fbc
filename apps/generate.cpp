// gpt2vk generate: the prompt, then the model's continuation, streamed to stdout as it comes;
// logs and the summary on stderr.
#include <cstdio>
#include <random>

#include "apps/commands.h"
#include "model/generation/generate.h"
#include "model/text/utf8.h"

namespace app {

int generate(const GenerateArgs& args) {
  const std::string text = read_text(args.prompt, args.file);
  Session s = open_session(args.model);
  const model::Config& c = s.model->config();
  const std::vector<int32_t> prompt = s.tokenizer->encode(text);

  model::GenerateOptions o;
  o.max_new = args.n;
  o.sampling = {args.temp, args.top_k, args.top_p, args.seed};
  if (!args.seed_given) o.sampling.seed = std::random_device{}();

  // Refuse before anything reaches stdout: there, only the text goes.
  model::check_prompt(c, prompt.size());
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  model::Utf8Stream stream;
  auto print = [&](int32_t id) {
    const std::string out = stream.push(s.tokenizer->token_bytes(id));
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  };
  auto note = [](const std::string& line) { std::fprintf(stderr, "\ngpt2vk: %s\n", line.c_str()); };
  model::GenerateResult r;
  try {
    r = model::generate(*s.model, prompt, o, print, note);
  } catch (...) {
    // A failure mid-stream (a lost device, ...): end the text's line, then main reports it.
    std::fputc('\n', stdout);
    std::fflush(stdout);
    throw;
  }
  const std::string rest = stream.finish();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  // The first new token comes from the prompt's pass; each later one costs a pass of its own.
  const double gen_rate = r.forward_passes > 1 && r.generate_seconds > 0
                              ? double(r.forward_passes - 1) / r.generate_seconds
                              : 0;
  std::fprintf(stderr,
               "gpt2vk: prompt %zu tokens, %.1f tok/s | generated %zu tokens, %.1f tok/s | %s | "
               "%s | stop: %s%s\n",
               prompt.size(), double(prompt.size()) / r.prompt_seconds, r.tokens.size(), gen_rate,
               s.model->device_name().c_str(), model::precision_name(s.model->precision()),
               r.stop.c_str(), c.eos_token_id ? "" : " (the model has no end-of-text token)");
  return 0;
}

}  // namespace app
