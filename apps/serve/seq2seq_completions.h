// `gpt2vk serve`'s /v1/completions for an encoder-decoder (Marian) folder: the prompt is the
// source text, encoded once; the completion is what greedy or beam search generates from it
// (model/generation/seq2seq_generate.h), as `gpt2vk seq2seq` prints it. A request body checked
// field by field, the runner that generates the requests in rounds in arrival order (greedy ones
// together), and the response in OpenAI's completions format.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "apps/seq2seq_session.h"
#include "apps/serve/metrics.h"
#include "apps/serve/request.h"

namespace app {

struct Seq2SeqRequest {
  std::vector<int32_t> source;  // the ids the encoder reads (the text's, then </s>), never empty
  // The folder's generation_config.json with the request's fields over it: beams (1: greedy),
  // max_new_tokens (max_tokens), length_penalty, no_repeat_ngram, early_stopping.
  model::BeamSettings search;
  bool stream = false;
};

// Beams of one request: each keeps its caches in a slot of the GPU model (model::kMaxSlots), so
// that a step of every beam is one batched pass; more would rerun each beam's prefix per step.
inline constexpr uint32_t kMaxServeBeams = 8;

// Parses /v1/completions for an encoder-decoder of `config`: "prompt" a non-empty string (or an
// array of one), or an array of token ids read as the encoder's input as it is, within n_ctx;
// "max_tokens" 1 to n_ctx - 1 (default: the folder's); "num_beams" 1 to kMaxServeBeams (and at
// most half the vocabulary); "length_penalty", "no_repeat_ngram_size", "early_stopping" (true,
// false, "never") as transformers' generate() takes them; "stream". n or best_of other than 1,
// logprobs, echo, stop and suffix are refused; temperature and top_p are checked and ignored
// (the search is deterministic). Throws ApiError (400) naming the field and the problem.
Seq2SeqRequest parse_seq2seq(const std::string& body, const model::Tokenizer& source,
                             const model::Config& config, const model::BeamSettings& defaults);

struct Seq2SeqResult {
  std::string text;              // the generated ids decoded by the target tokenizer
  std::string finish_reason;     // "stop": eos ended it; "length": max_tokens (or n_ctx) did
  size_t prompt_tokens = 0;      // the source's ids, </s> included
  size_t completion_tokens = 0;  // the ids generated, a final eos included
};

// The completion of one request in OpenAI's format: a text_completion object, or with `stream`
// server-sent events (one chunk holding the whole text, finish_reason and usage, then
// "data: [DONE]": the search ends before any of its text is known).
std::string seq2seq_response(const Seq2SeqResult& r, bool stream, const std::string& id,
                             std::time_t created, const std::string& model_name);

// Generates for the requests in rounds, in arrival order, on the session's model; thread-safe.
// Whoever finds the model free runs the next round: the first waiting request and, where it is
// greedy, the greedy requests right after it, up to the decoder's slots with sources of their
// own (GpuModelOptions::sources), decoded together (model::decode_batch). A request's ids are
// the ones it gets alone, whatever shares its round.
class Seq2SeqRunner {
 public:
  Seq2SeqRunner(Seq2SeqSession& session, Metrics& metrics, uint32_t max_queue);
  // Waits for the requests before it, asking `gone` every 200 ms whether its client left (then
  // it gives its place up and returns nullopt), then generates, or is generated for in another
  // request's round. Throws ApiError 503 (with Retry-After) when max_queue requests already
  // wait, and what its generation threw.
  std::optional<Seq2SeqResult> run(const Seq2SeqRequest& request,
                                   const std::function<bool()>& gone);

 private:
  struct Waiter {
    const Seq2SeqRequest* request;
    bool taken = false, done = false;  // in a round; its result or error in
    Seq2SeqResult result;
    std::exception_ptr error;
  };
  // Generates for the round's requests, the lock released: together where there are several,
  // and where that fails, each alone, so that one request's failure is its own.
  void run_round(std::span<Waiter* const> round) noexcept;
  Seq2SeqResult generate(const Seq2SeqRequest& request);
  Seq2SeqResult result_of(const Seq2SeqRequest& request, const std::vector<int32_t>& ids);
  void update_metrics();  // with mutex_ held

  Seq2SeqSession& session_;
  Metrics& metrics_;
  const uint32_t max_queue_;
  const uint32_t round_;  // requests a round takes at most
  std::mutex mutex_;
  std::condition_variable turn_;
  std::deque<Waiter*> queue_;  // waiting and generating, in arrival order
  bool busy_ = false;          // a round is generating
};

}  // namespace app
