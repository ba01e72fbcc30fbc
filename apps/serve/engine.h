// `gpt2vk serve`'s engine: one thread that owns the model and runs the queued completion
// requests, each as a stream of events its HTTP handler turns into a response. Requests take the
// model's slots (a KV cache each); every step runs one prompt chunk for each newcomer, then one
// pass that decodes a token for every request past its prompt (continuous batching: a request
// joins or leaves between steps). A slot keeps its cache after its request: a new request takes
// the free slot whose tokens share the longest prefix with its prompt, and computes only the
// rest (prompt-prefix reuse).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/serve/metrics.h"
#include "apps/serve/request.h"
#include "model/forward/model.h"
#include "model/text/tokenizer.h"

namespace app {

struct TokenLogprob {
  int32_t id = 0;
  std::optional<double> logprob;  // none for the prompt's first token (nothing predicts it)
  std::vector<std::pair<int32_t, double>> top;  // the best alternatives, best first
};

// One piece of a request's answer. The text of all pieces joined is the completion (with echo,
// the prompt first); each piece is valid UTF-8: a character split across tokens waits for its
// last byte, and text that could begin a stop string waits until it cannot.
struct Event {
  std::string text;
  std::vector<TokenLogprob> logprobs;  // the tokens since the last piece (logprobs asked for)
  bool done = false;
  std::string finish_reason;  // done: "stop" (end-of-text or a stop string) or "length"
  uint32_t prompt_tokens = 0, completion_tokens = 0;  // done
  uint32_t cached_tokens = 0;  // done: prompt tokens taken from the slot's cache, not computed
  // done: seconds from the request's arrival until it took a slot, until its first new token
  // (none generated: none), and until this event.
  double queued_s = 0, total_s = 0;
  std::optional<double> first_token_s;
  std::optional<ApiError> error;  // done, failed: what to tell the client
};

class Job {
 public:
  explicit Job(CompletionRequest r) : request(std::move(r)) {}
  const CompletionRequest request;
  const std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();

  // The handler's side: the next event, or none within `timeout`.
  std::optional<Event> next(std::chrono::milliseconds timeout);
  // The client is gone: the engine drops the request at its next token (or before it starts).
  void cancel();
  bool cancelled() const;

  void push(Event e);  // the engine's side

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> events_;
  bool cancelled_ = false;
};

class Engine {
 public:
  // device_lost: whether the model's device is gone (then /health fails and nothing more runs).
  // The model's slots (Model::slots) are the requests that decode together. prefix_reuse: a
  // request may start from the cache a slot kept (a request's cache_prompt can refuse it).
  Engine(model::Model& model, const model::Tokenizer& tokenizer, Metrics& metrics,
         uint32_t max_queue, bool prefix_reuse, std::function<bool()> device_lost);
  ~Engine();

  // Queues a request. Throws ApiError 503 when max_queue requests already wait (with a
  // Retry-After estimate), while shutting down, or after the device failed.
  std::shared_ptr<Job> submit(CompletionRequest r);
  // Why nothing more can run (the device is lost, or a fatal error), if so.
  std::optional<std::string> failure() const;
  // Refuses new requests and those still waiting (503); returns once the running ones are done.
  void drain();
  // Seconds a client refused for a full queue should wait: the queue at the mean request time.
  uint32_t retry_after() const;

  // Prompt tokens one step runs for a request still reading its prompt: what a step of the
  // others may wait for a newcomer. Fixed, so a request's passes (and bits) do not depend on
  // what else runs.
  static constexpr uint32_t kPrefillChunk = 64;

 private:
  struct Slot;
  // What a slot's cache holds, kept after its request is done: the ids it has run, and how many
  // of the first are from whole prefill chunks [64k, 64k + 64), the passes a fresh prompt of
  // those ids runs too.
  struct Cached {
    std::vector<int32_t> ids;
    size_t chunked = 0;
  };
  // The prompt tokens request r may take from cache c (see engine.cpp).
  size_t reusable(const Cached& c, const CompletionRequest& r) const;
  void loop();
  void admit();                        // queued requests into free slots
  void prefill(Slot& s, uint32_t index);  // one chunk of its prompt
  bool pick(Slot& s);                  // its next token; false once it is finished
  void finish(Slot& s, std::string reason, bool stopped);
  void fail(Slot& s, const ApiError& e);
  void update_metrics();  // with mutex_ held

  model::Model& model_;
  const model::Tokenizer& tokenizer_;
  Metrics& metrics_;
  const uint32_t max_queue_;
  const bool prefix_reuse_;
  std::function<bool()> device_lost_;
  std::vector<std::unique_ptr<Slot>> slots_;  // the engine thread's; null = free
  std::vector<Cached> cached_;                // the engine thread's, one per slot

  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::shared_ptr<Job>> queue_;
  uint32_t running_ = 0;
  bool stopping_ = false, draining_ = false;
  std::optional<std::string> failure_;
  double seconds_total_ = 0;  // of finished requests, for retry_after
  uint64_t finished_ = 0;
  uint32_t step_delay_ms_ = 0;  // GPT2VK_SERVE_STEP_DELAY_MS: a test hook, slows every step
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace app
