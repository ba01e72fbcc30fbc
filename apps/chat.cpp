// gpt2vk chat: a conversation on stdin and stdout. Each user line joins the conversation, which
// is rendered with the plain chat template (model/text/chat_template.h) and continued by the
// model; the reply streams to stdout up to the template's end of turn, the end of text or -n
// tokens. Notes and the prompt ("> ", on a terminal) go to stderr, so stdout holds the replies
// alone, a line each.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "apps/commands.h"
#include "apps/options.h"
#include "apps/session.h"
#include "apps/signals.h"
#include "model/generation/generate.h"
#include "model/text/chat_template.h"
#include "model/generation/stop_strings.h"
#include "model/text/utf8.h"

namespace app {
namespace {

struct ChatArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string system;  // the system text before the first turn; "" = none
  int64_t n = 128;     // tokens of a reply at most
};

// A reply's end: the signal that cut it (SIGINT, SIGTERM), or 0.
struct Reply {
  std::string text;  // as printed
  int signal = 0;
};

// Generates the reply to `prompt` (the rendered conversation), printing it as it comes.
Reply reply(Session& s, const std::vector<int32_t>& prompt, const ChatArgs& args) {
  model::GenerateOptions o;
  o.max_new = static_cast<uint32_t>(args.n);
  o.sampling = args.sampling.options();
  // A test hook: each token waits this long, so that a test's signal surely lands mid-reply.
  const char* delay_env = std::getenv("GPT2VK_CHAT_TOKEN_DELAY_MS");
  const int delay_ms = delay_env ? std::atoi(delay_env) : 0;
  // SIGINT or SIGTERM ends the reply before its next token; the end of turn ends it too.
  const StopSignals signals;
  o.interrupted = [&] { return signals.received() != 0; };
  // Text that may begin the end of turn waits until it cannot.
  model::StopStrings end_of_turn({std::string(model::kChatEndOfTurn)});
  o.stopped = [&] { return end_of_turn.stopped(); };

  model::Utf8Stream utf8;
  model::ChatReply shown;
  Reply r;
  auto print = [&](const std::string& text) {
    const std::string out = shown.push(text);
    if (out.empty()) return;
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    r.text += out;
  };
  auto on_token = [&](int32_t id) {
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    print(end_of_turn.push(utf8.push(s.tokenizer->generated_bytes(id, s.model->config().n_vocab))));
  };
  std::vector<std::string> notes;  // after the reply's line
  try {
    model::generate(*s.model, prompt, o, on_token,
                    [&](const std::string& n) { notes.push_back(n); });
  } catch (...) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
    throw;
  }
  if (!end_of_turn.stopped()) {  // what waited for the end of turn was not one
    print(end_of_turn.push(utf8.finish()));
    print(end_of_turn.finish());
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  r.signal = signals.received();
  for (const std::string& n : notes) std::fprintf(stderr, "gpt2vk: %s\n", n.c_str());
  if (r.signal == SIGINT) std::fprintf(stderr, "gpt2vk: reply stopped (SIGINT)\n");
  return r;
}

int chat(const ChatArgs& args) {
  if (auto bad = model::find_invalid_utf8(args.system))
    throw std::runtime_error("--system: invalid UTF-8 at byte " + std::to_string(*bad));
  Session s = open_session(args.model);
  const model::Config& c = s.model->config();
  if (args.n >= c.n_ctx)
    throw std::runtime_error("-n " + std::to_string(args.n) +
                             " leaves no room for the "
                             "conversation in the model's context of " +
                             std::to_string(c.n_ctx) + " tokens; give -n below " +
                             std::to_string(c.n_ctx));
  if (model::folder_has_chat_template(model_dir(args.model)))
    std::fprintf(stderr,
                 "gpt2vk: note: the folder's chat_template (Jinja) is not rendered; "
                 "replies follow gpt2vk's plain template (docs/chat.md)\n");
  // The conversation, the turns dropped for the context left out; the reply's -n tokens
  // must fit beside it.
  std::vector<model::ChatMessage> history;
  if (!args.system.empty()) history.push_back({model::ChatRole::System, args.system});
  const size_t budget = c.n_ctx - static_cast<size_t>(args.n);
  const bool terminal = isatty(STDIN_FILENO);
  for (std::string line;;) {
    if (terminal) std::fputs("> ", stderr);
    std::fflush(stderr);
    if (!std::getline(std::cin, line)) {  // end of input (Ctrl-D)
      if (terminal) std::fputc('\n', stderr);
      return 0;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (auto bad = model::find_invalid_utf8(line)) {
      std::fprintf(stderr, "gpt2vk: that line is not valid UTF-8 (at byte %zu); not sent\n", *bad);
      continue;
    }
    history.push_back({model::ChatRole::User, line});
    model::FittedChat f;
    try {
      f = model::fit_chat(history, budget, [&](const std::string& text) {
        return s.tokenizer->encode(text).size();
      });
    } catch (const std::runtime_error& e) {  // a character the vocabulary lacks
      std::fprintf(stderr, "gpt2vk: that line cannot be tokenized (%s); not sent\n", e.what());
      history.pop_back();
      continue;
    }
    if (!f.fits) {
      std::fprintf(stderr,
                   "gpt2vk: that line is too long: the conversation's last turn takes "
                   "%zu tokens, and the model's context of %u keeps %lld of them for "
                   "the reply (-n); not sent\n",
                   f.tokens, c.n_ctx, static_cast<long long>(args.n));
      history.pop_back();
      continue;
    }
    if (f.dropped_turns)
      std::fprintf(stderr,
                   "gpt2vk: note: the conversation outgrew the context of %u tokens: "
                   "the oldest %zu turn%s left out\n",
                   c.n_ctx, f.dropped_turns, f.dropped_turns > 1 ? "s" : "");
    history = std::move(f.messages);
    const Reply r = reply(s, s.tokenizer->encode(model::render_chat(history)), args);
    history.push_back({model::ChatRole::Assistant, r.text});
    if (r.signal == SIGTERM) return 128 + SIGTERM;
  }
}

}  // namespace

Command add_chat(CLI::App& cli) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* cmd = cli.add_subcommand(
      "chat",
      "a conversation: each line of stdin is a user turn, each reply streams to stdout "
      "(docs/chat.md); Ctrl-C stops a reply, Ctrl-D leaves");
  add_model_options(*cmd, args->model);
  cmd->add_option("--system", args->system, "a system text before the conversation");
  cmd->add_option("-n,--n-predict", args->n, "tokens of a reply at most (default 128)")
      ->check(whole_number(1, 1000000));
  add_sampling_options(*cmd, args->sampling);
  return {cmd, [args] { return chat(*args); }};
}

}  // namespace app
