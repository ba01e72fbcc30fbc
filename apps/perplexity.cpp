// gpt2vk perplexity: the mean negative log-likelihood of a text under the model.
//
// Windows of N + 1 tokens overlapping by one (window i = tokens[i N .. i N + N]): each scores
// its N predictions, so every token after the first is predicted exactly once, from at most N
// tokens of context. A last, shorter window scores what remains.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "apps/commands.h"
#include "apps/options.h"
#include "apps/progress.h"
#include "apps/session.h"

namespace app {
namespace {

struct PerplexityArgs {
  ModelArgs model;
  std::string file;
  uint32_t ctx = 0;  // 0: the model's n_ctx
};

int perplexity(const PerplexityArgs& args) {
  const std::string text = read_text("", args.file);
  Session s = open_session(args.model);
  const model::Config& c = s.model->config();
  const uint32_t N = args.ctx ? args.ctx : c.n_ctx;
  if (N > c.n_ctx)
    throw std::runtime_error("--ctx " + std::to_string(N) + " is longer than the model's context of " +
                             std::to_string(c.n_ctx));
  const std::vector<int32_t> ids = s.tokenizer->encode(text);
  if (ids.size() < 2) throw std::runtime_error(args.file + ": needs at least 2 tokens to score");

  const size_t V = c.n_vocab;
  const size_t total = ids.size() - 1;
  double nll = 0;
  size_t count = 0;
  // On a terminal a line that rewrites itself (at most ~10 times a second); in a log, only the
  // final line, so that a redirected stderr holds no "\r".
  using Clock = std::chrono::steady_clock;
  const bool tty = stderr_is_terminal();
  const Clock::time_point began = Clock::now();
  Clock::time_point drawn{};
  const auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - began).count(); };
  for (size_t start = 0; start + 1 < ids.size(); start += N) {
    const size_t n = std::min<size_t>(N, total - start);  // predictions in this window
    s.model->reset();
    const std::vector<float> logits = s.model->logits(std::span(ids).subspan(start, n));
    for (size_t t = 0; t < n; t++) {
      const float* row = &logits[t * V];
      double m = -INFINITY, sum = 0;
      for (size_t v = 0; v < V; v++) m = std::max(m, double{row[v]});
      for (size_t v = 0; v < V; v++) sum += std::exp(double{row[v]} - m);
      nll += m + std::log(sum) - double{row[ids[start + t + 1]]};
    }
    count += n;
    if (tty && count < total && Clock::now() - drawn >= std::chrono::milliseconds(100)) {
      drawn = Clock::now();
      const std::string line = scoring_line(count, total, nll / double(count), seconds());
      std::fprintf(stderr, "\r%s\033[K", line.c_str());
    }
  }
  std::fprintf(stderr, "%s%s\n", tty ? "\r\033[K" : "",
               scoring_line(count, total, nll / double(count), seconds()).c_str());
  const double mean = nll / double(count);
  std::printf("%s, %s weights, context %u\n", s.model->device_name().c_str(),
              model::precision_name(s.model->precision()), N);
  std::printf("mean nll = %.6f\n", mean);
  std::printf("ppl = %.4f over %zu tokens\n", std::exp(mean), count);
  return 0;
}

}  // namespace

Command add_perplexity(CLI::App& cli) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* cmd =
      cli.add_subcommand("perplexity", "mean negative log-likelihood and perplexity of a text");
  add_model_options(*cmd, args->model);
  cmd->add_option("-f,--file", args->file, "the text to score")->required();
  cmd->add_option("-c,--ctx", args->ctx, "window length N (default: the model's context)")
      ->check(whole_number(1, 1u << 20));
  return {cmd, [args] { return perplexity(*args); }};
}

}  // namespace app
