// gpt2vk generate: the prompt, then the model's continuation, streamed to stdout as it comes;
// logs and the summary on stderr.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/commands.h"
#include "apps/options.h"
#include "apps/progress.h"
#include "apps/session.h"
#include "apps/signals.h"
#include "model/generation/generate.h"
#include "model/generation/stop_strings.h"
#include "model/text/utf8.h"

namespace app {
namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string prompt, file;
  std::string positional;  // `gpt2vk generate "TEXT"`: the prompt without -p
  int64_t n = 64;  // -1: until the end of text or a full context
  SamplingArgs sampling;  // --temp, --top-k, --top-p, --seed and the penalties
  std::vector<std::string> stops;  // --stop, at most StopStrings::kMax
  uint32_t ctx = 0;                // -c; 0: the model's n_ctx
};

int generate(const GenerateArgs& args) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const auto since_start = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  if (!args.positional.empty() && (!args.prompt.empty() || !args.file.empty()))
    throw std::runtime_error("the prompt is given twice: as \"" + args.positional + "\" and as " +
                             (args.file.empty() ? "-p" : "-f") + "; give one");
  const std::string text = read_text(args.positional.empty() ? args.prompt : args.positional, args.file);
  Session s = open_session(args.model);
  const double load_s = since_start();
  const model::Config& c = s.model->config();
  const std::vector<int32_t> prompt = s.tokenizer->encode(text);

  // Refuse before anything reaches stdout: there, only the text goes.
  model::check_prompt(c, prompt.size(), args.ctx);
  model::GenerateOptions o;
  o.context = args.ctx;
  const uint32_t window = args.ctx ? args.ctx : c.n_ctx;
  // -1: what the window has room for beside the prompt.
  o.max_new = args.n >= 0 ? static_cast<uint32_t>(args.n)
                          : static_cast<uint32_t>(window - prompt.size());
  o.sampling = args.sampling.options();
  // SIGINT or SIGTERM, once one came: the token being chosen is not, the text ends with a
  // newline, the summary says why, and the command exits 128 + the signal, as a shell expects.
  const StopSignals signals;
  o.interrupted = [&] { return signals.received() != 0; };
  // A line that counts the pipelines as they compile, on a terminal.
  const bool tty = stderr_is_terminal();
  bool line_open = false;  // the progress line has no newline yet
  o.on_compile = [&, t0 = Clock::now()](size_t done, size_t total) {
    if (!tty) return;
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::fprintf(stderr, "\rgpt2vk: compiling %zu pipelines ... %zu done, %.1f s", total, done,
                 secs);
    line_open = done < total;
    if (!line_open) std::fputc('\n', stderr);
  };

  // The prompt goes out with the first token, after the compile's progress line (on stderr), so
  // that a terminal shows that line on its own and not over the prompt.
  bool echoed = false;
  auto echo_prompt = [&] {
    if (echoed) return;
    echoed = true;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  model::Utf8Stream stream;
  // --stop: the text ends right before the first stop string; what could begin one waits.
  model::StopStrings stops(args.stops);
  o.stopped = [&] { return stops.stopped(); };
  double first_token_s = 0;  // from the command's start to the first new token's text
  auto print = [&](int32_t id) {
    echo_prompt();
    if (first_token_s == 0) first_token_s = since_start();
    const std::string out = stops.push(stream.push(s.tokenizer->generated_bytes(id, c.n_vocab)));
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  };
  // Notes wait for the end of the text, so that none lands inside its line on a terminal; a note
  // that comes again (each slide of the window) is counted, not repeated.
  std::vector<std::pair<std::string, size_t>> notes;
  auto note = [&](const std::string& line) {
    if (!notes.empty() && notes.back().first == line)
      notes.back().second++;
    else
      notes.push_back({line, 1});
  };
  model::GenerateResult r;
  try {
    r = model::generate(*s.model, prompt, o, print, note);
  } catch (...) {
    // A failure while compiling or mid-stream (a lost device, ...): end the progress line and
    // the text's, then main reports it.
    if (line_open) std::fputc('\n', stderr);
    echo_prompt();
    std::fputc('\n', stdout);
    std::fflush(stdout);
    throw;
  }
  echo_prompt();  // no new token: -n 0, or end-of-text first
  // An unfinished character's U+FFFD, and the text held back for a stop string that never came.
  std::string rest = stops.push(stream.finish());
  if (stops.stopped()) r.stop = "stop string";
  rest += stops.finish();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  for (const auto& [line, times] : notes)
    std::fprintf(stderr, "gpt2vk: %s%s\n", line.c_str(),
                 times > 1 ? (" (" + std::to_string(times) + " times)").c_str() : "");

  // The first new token comes from the prompt's pass; each later one costs a pass of its own.
  const double gen_rate = r.forward_passes > 1 && r.generate_seconds > 0
                              ? double(r.forward_passes - 1) / r.generate_seconds
                              : 0;
  // Load (checkpoint, device, weights) and the first token's latency from the start, which on a
  // driver with a cold shader cache includes compiling the pipelines the prompt's pass uses.
  // Lavapipe compiles a pipeline at its first dispatch, so there the compile is in the prompt
  // and the line says so.
  char first[32] = "none";
  if (first_token_s > 0) std::snprintf(first, sizeof first, "%.2f s", first_token_s);
  std::string compile = pipelines_note(r.pipelines, r.compile_seconds, s.device.get());
  if (!compile.empty()) compile = ", " + compile;
  std::string stop = args.n < 0 && r.stop == "length" ? "context full" : r.stop;
  const int signal = signals.received();
  if (r.stop == "interrupted") stop += signal == SIGTERM ? " (SIGTERM)" : " (SIGINT)";
  // The seed that reproduces a sampled run with --seed; greedy decoding needs none.
  const std::string sampling =
      args.sampling.temp > 0 ? "seed " + std::to_string(o.sampling.seed) : std::string("greedy");
  std::fprintf(stderr,
               "gpt2vk: load %.2f s%s, first token at %s | prompt %zu tokens, %.1f tok/s | "
               "generated %zu tokens, %.1f tok/s | %s | %s%s | %s | stop: %s%s\n",
               load_s, compile.c_str(), first, prompt.size(),
               double(prompt.size()) / r.prompt_seconds, r.tokens.size(), gen_rate,
               s.model->device_name().c_str(), model::precision_name(s.model->precision()),
               args.model.kv_cache == "f16" ? ", KV cache f16" : "", sampling.c_str(), stop.c_str(),
               c.eos_token_id ? "" : " (the model has no end-of-text token)");
  return r.stop == "interrupted" ? 128 + signal : 0;
}

}  // namespace

Command add_generate(CLI::App& cli) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = cli.add_subcommand("generate", "continue a prompt, streaming the text to stdout");
  add_model_options(*cmd, args->model);
  cmd->add_option("-p,--prompt", args->prompt, "the text to continue");
  cmd->add_option("prompt", args->positional, "the text to continue (as -p)")
      ->type_name("TEXT");
  cmd->add_option("-f,--file", args->file, "read the prompt from a file");
  cmd->add_option("-n,--n-predict", args->n,
                  "tokens to generate (default 64); -1: until the end of text or the context is "
                  "full")
      ->check(whole_number(-1, 1000000, " (-1: until the end of text or a full context)"));
  add_sampling_options(*cmd, args->sampling);
  // One value per --stop (a TEXT after it stays the prompt), at most StopStrings::kMax of them.
  auto stop_count = std::make_shared<size_t>(0);
  cmd->add_option("--stop", args->stops,
                  "end the text right before this string, which is not printed; repeatable, up "
                  "to 4")
      ->allow_extra_args(false)
      ->check(CLI::Validator(
          [stop_count](std::string& in) -> std::string {
            if (in.empty()) return "a stop string may not be empty";
            // Whole characters only, so that a match never cuts one in two.
            if (auto bad = model::find_invalid_utf8(in))
              return "a stop string must be valid UTF-8 (byte " + std::to_string(*bad) + " is not)";
            if (++*stop_count > model::StopStrings::kMax)
              return "at most " + std::to_string(model::StopStrings::kMax) + " stop strings";
            return {};
          },
          ""));
  cmd->add_option("-c,--ctx,--ctx-size", args->ctx,
                  "the window: at most N tokens, sliding at N as it does at the model's context "
                  "(1 to the model's context; default: the model's)")
      ->check(whole_number(1, UINT32_MAX));
  return {cmd, [args] { return generate(*args); }};
}

}  // namespace app
