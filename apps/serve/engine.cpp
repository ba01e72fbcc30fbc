#include "apps/serve/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <cstdlib>

#include "model/generation/sampler.h"
#include "model/generation/stop_strings.h"
#include "model/text/utf8.h"

namespace app {

using Clock = std::chrono::steady_clock;

std::optional<Event> Job::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void Job::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
}

bool Job::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

void Job::push(Event e) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(e));
  }
  ready_.notify_all();
}

Engine::Engine(model::Model& model, const model::Tokenizer& tokenizer, Metrics& metrics,
               uint32_t max_queue, bool prefix_reuse, std::function<bool()> device_lost)
    : model_(model),
      tokenizer_(tokenizer),
      metrics_(metrics),
      max_queue_(max_queue),
      prefix_reuse_(prefix_reuse),
      device_lost_(std::move(device_lost)),
      slots_(model.slots()),
      cached_(model.slots()),
      step_delay_ms_(std::getenv("GPT2VK_SERVE_STEP_DELAY_MS")
                         ? static_cast<uint32_t>(std::atoi(std::getenv("GPT2VK_SERVE_STEP_DELAY_MS")))
                         : 0),
      thread_([this] { loop(); }) {}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<Job> Engine::submit(CompletionRequest r) {
  std::lock_guard lock(mutex_);
  if (failure_) throw ApiError(503, "the server cannot generate any more: " + *failure_);
  if (draining_ || stopping_) throw ApiError(503, "the server is shutting down");
  if (queue_.size() >= max_queue_) {
    ApiError e(503, "the server is busy: " + std::to_string(queue_.size()) +
                        " requests are waiting already (--max-queue); retry later");
    e.retry_after = retry_after();
    throw e;
  }
  auto job = std::make_shared<Job>(std::move(r));
  queue_.push_back(job);
  update_metrics();
  wake_.notify_all();
  return job;
}

std::optional<std::string> Engine::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

uint32_t Engine::retry_after() const {
  const double mean = finished_ ? seconds_total_ / double(finished_) : 1.0;
  const double per_slot = double(queue_.size() + 1) / double(std::max<size_t>(1, slots_.size()));
  return static_cast<uint32_t>(std::clamp(std::ceil(mean * per_slot), 1.0, 3600.0));
}

namespace {
Event error_event(const ApiError& e) {
  Event out;
  out.done = true;
  out.error = e;
  return out;
}
}  // namespace

void Engine::drain() {
  std::unique_lock lock(mutex_);
  draining_ = true;
  for (auto& job : queue_) job->push(error_event(ApiError(503, "the server is shutting down")));
  queue_.clear();
  update_metrics();
  idle_.wait(lock, [&] { return running_ == 0; });
}

void Engine::update_metrics() { metrics_.set_queue(static_cast<uint32_t>(queue_.size()), running_); }

namespace {

// log-softmax of one position's logits at temperature 1 (what the model predicts, before any
// sampling cut): the chosen id's log-probability and the best n, best first (ties to the lower
// id), accumulated in double.
TokenLogprob logprob_of(std::span<const float> logits, int32_t id, uint32_t n) {
  // NaN (broken weights) counts as -inf, as the sampler takes it.
  auto at = [&](int32_t i) {
    const float x = logits[size_t(i)];
    return std::isnan(x) ? -double(INFINITY) : double(x);
  };
  double top = -INFINITY;
  for (size_t i = 0; i < logits.size(); i++) top = std::max(top, at(int32_t(i)));
  double sum = 0;
  for (size_t i = 0; i < logits.size(); i++) sum += std::exp(at(int32_t(i)) - top);
  const double norm = top + std::log(sum);
  TokenLogprob t;
  t.id = id;
  t.logprob = at(id) - norm;
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t keep = std::min<size_t>(n, order.size());
  std::partial_sort(order.begin(), order.begin() + long(keep), order.end(), [&](int32_t a, int32_t b) {
    return at(a) > at(b) || (at(a) == at(b) && a < b);
  });
  for (size_t i = 0; i < keep; i++)
    t.top.emplace_back(order[i], at(order[i]) - norm);
  return t;
}

}  // namespace

// A request in a slot: where its prompt and its text stand.
struct Engine::Slot {
  std::shared_ptr<Job> job;
  model::Sampler sampler;
  Clock::time_point started = Clock::now(), last, first;  // first: its first new token
  size_t prefilled = 0;     // prompt tokens in the cache: run, or kept (cached)
  size_t cached = 0;        // prompt tokens kept from the slot's last request
  std::vector<float> next;  // the logits the next token comes from, once the prompt has run
  Event head;               // the echoed prompt and its log-probabilities
  model::Utf8Stream utf8;
  model::StopStrings stops;  // the completion's text goes out through it
  std::vector<int32_t> tokens;  // the prompt, then the generated ids: what the penalties count
  uint32_t generated = 0;
  int32_t token = -1;                 // the last token picked, to decode next
  std::vector<TokenLogprob> pending;  // log-probabilities not yet sent

  Slot(std::shared_ptr<Job> j, const model::SamplerOptions& o)
      : job(std::move(j)), sampler(o), stops(job->request.stop), tokens(job->request.prompt) {}
};

// The prompt tokens request r may take from cache c: their common prefix, short of the prompt's
// last token (a pass must give the next token's logits), in whole prefill chunks that the cache
// computed as a fresh prompt's passes would. The rest then runs in the same passes over the
// same keys and values as without reuse, so its tokens and log-probabilities are the same bits
// and a request's answer still does not depend on what ran before it (docs/serving.md,
// "Prompt-prefix reuse"). None for echo with logprobs: it needs every prompt row's logits.
size_t Engine::reusable(const Cached& c, const CompletionRequest& r) const {
  if (!prefix_reuse_ || !r.cache_prompt || (r.echo && r.logprobs) || r.prompt.size() < 2) return 0;
  const size_t limit = std::min(c.chunked, r.prompt.size() - 1);
  size_t n = 0;
  while (n < limit && c.ids[n] == r.prompt[n]) n++;
  return n - n % kPrefillChunk;
}

void Engine::admit() {
  while (true) {
    std::vector<uint32_t> free;
    for (uint32_t i = 0; i < slots_.size(); i++)
      if (!slots_[i]) free.push_back(i);
    if (free.empty()) return;
    std::shared_ptr<Job> job;
    {
      std::lock_guard lock(mutex_);
      while (!queue_.empty() && !job) {
        job = queue_.front();
        queue_.pop_front();
        if (job->cancelled()) job.reset();
      }
      if (!job) return;
      running_++;
      update_metrics();
    }
    // The free slot that keeps the most of the prompt; among equals, the one holding the fewest
    // tokens (the least to lose for the requests after), then the first.
    uint32_t i = free[0];
    size_t keep = reusable(cached_[i], job->request);
    for (uint32_t f : free) {
      const size_t n = reusable(cached_[f], job->request);
      if (n > keep || (n == keep && cached_[f].ids.size() < cached_[i].ids.size())) {
        i = f;
        keep = n;
      }
    }
    model::SamplerOptions so = job->request.sampling;
    if (!job->request.seed_given) so.seed = std::random_device{}();
    slots_[i] = std::make_unique<Slot>(job, so);
    slots_[i]->prefilled = slots_[i]->cached = keep;
    model_.slot_truncate(i, static_cast<uint32_t>(keep));
    cached_[i].ids.resize(keep);
    cached_[i].chunked = keep;
    if (job->request.echo) slots_[i]->head.text = job->request.prompt_text;
  }
}

void Engine::prefill(Slot& s, uint32_t index) {
  const CompletionRequest& r = s.job->request;
  const size_t V = model_.config().n_vocab;
  const size_t n = std::min<size_t>(kPrefillChunk, r.prompt.size() - s.prefilled);
  const std::span<const int32_t> chunk = std::span(r.prompt).subspan(s.prefilled, n);
  // echo + logprobs: every row's logits, row t predicting token t + 1.
  const bool rows = r.echo && r.logprobs.has_value();
  std::vector<float> out = model_.slot_prefill(index, chunk, rows);
  Cached& c = cached_[index];
  c.ids.insert(c.ids.end(), chunk.begin(), chunk.end());
  // A whole chunk at a multiple of the chunk size: the pass a fresh prompt runs there. (An
  // every-row pass may be cut differently on a GPU with a watchdog: not counted.)
  if (n == kPrefillChunk && c.chunked == s.prefilled && !rows) c.chunked += n;
  if (rows) {
    if (s.prefilled == 0) s.head.logprobs.push_back({r.prompt[0], std::nullopt, {}});
    for (size_t t = 0; t < n; t++) {
      const size_t at = s.prefilled + t + 1;  // the token row t predicts
      if (at < r.prompt.size())
        s.head.logprobs.push_back(
            logprob_of(std::span(out).subspan(t * V, V), r.prompt[at], r.logprobs.value_or(0)));
    }
    out.erase(out.begin(), out.end() - long(V));
  }
  s.prefilled += n;
  if (s.prefilled < r.prompt.size()) return;
  s.next = std::move(out);
  s.last = Clock::now();
  if (!s.head.text.empty() || !s.head.logprobs.empty()) s.job->push(std::move(s.head));
}

bool Engine::pick(Slot& s) {
  const CompletionRequest& r = s.job->request;
  const model::Config& c = model_.config();
  if (s.generated == r.max_tokens) {
    finish(s, "length", false);
    return false;
  }
  // The penalties: repeat_penalty on the last repeat_last_n of prompt and completion
  // (llama.cpp's server; -1: all of them, which fit the slot), presence and frequency on the
  // completion's own tokens (OpenAI's "sampled prior to the current position"). Each request
  // counts its own tokens only, so the batch it decodes in changes nothing. The log-probabilities
  // stay the model's own, before the penalties, as they stay before the other cuts.
  const std::span<const int32_t> completion = std::span(s.tokens).subspan(r.prompt.size());
  const int32_t id = s.sampler.pick(model::Candidates{{}, s.next},
                                    {s.sampler.recent(s.tokens, s.tokens.size()), completion});
  if (c.eos_token_id && id == *c.eos_token_id) {
    finish(s, "stop", false);
    return false;
  }
  if (r.logprobs) s.pending.push_back(logprob_of(s.next, id, *r.logprobs));
  s.generated++;
  const Clock::time_point now = Clock::now();
  if (s.generated == 1) {
    s.first = now;
    metrics_.first_token(std::chrono::duration<double>(now - s.job->arrived).count());
  } else {
    metrics_.per_token(std::chrono::duration<double>(now - s.last).count());
  }
  s.last = now;
  s.tokens.push_back(id);
  std::string text = s.stops.push(s.utf8.push(tokenizer_.generated_bytes(id, model_.config().n_vocab)));
  if (!text.empty() || !s.pending.empty()) {
    Event e;
    e.text = std::move(text);
    e.logprobs = std::move(s.pending);
    s.pending.clear();
    s.job->push(std::move(e));
  }
  if (s.stops.stopped()) {
    finish(s, "stop", true);
    return false;
  }
  if (s.generated == r.max_tokens) {
    finish(s, "length", false);
    return false;
  }
  s.token = id;
  return true;
}

// The end: an unfinished character as U+FFFD, and what was held back for the stop strings.
void Engine::finish(Slot& s, std::string reason, bool stopped) {
  const CompletionRequest& r = s.job->request;
  Event done;
  if (!stopped) {
    done.text = s.stops.push(s.utf8.finish());
    if (s.stops.stopped()) reason = "stop";
    done.text += s.stops.finish();
  }
  done.logprobs = std::move(s.pending);
  done.done = true;
  done.finish_reason = reason;
  done.prompt_tokens = static_cast<uint32_t>(r.prompt.size());
  done.completion_tokens = s.generated;
  done.cached_tokens = static_cast<uint32_t>(s.cached);
  const auto since = [&](Clock::time_point t) {
    return std::chrono::duration<double>(t - s.job->arrived).count();
  };
  done.queued_s = since(s.started);
  if (s.generated) done.first_token_s = since(s.first);
  done.total_s = since(Clock::now());
  metrics_.tokens(r.prompt.size(), s.generated);
  metrics_.cached_tokens(s.cached);
  s.job->push(std::move(done));
}

void Engine::fail(Slot& s, const ApiError& e) { s.job->push(error_event(e)); }

void Engine::loop() {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || running_ > 0; });
      if (stopping_) return;
    }
    if (!failure()) admit();
    if (step_delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms_));
    std::vector<uint32_t> freed;
    std::optional<ApiError> fatal;
    // An exception from the model fails the requests of that pass; a lost device, every one.
    auto failed = [&](const std::exception& e) {
      if (device_lost_ && device_lost_()) {
        std::lock_guard lock(mutex_);
        failure_ = std::string("the GPU failed: ") + e.what();
        fatal = ApiError(503, *failure_);
        return *fatal;
      }
      return ApiError(500, std::string("generation failed: ") + e.what());
    };
    // 1. One prompt chunk for each request still reading its prompt.
    for (uint32_t i = 0; i < slots_.size() && !fatal; i++) {
      Slot* s = slots_[i].get();
      if (!s || !s->next.empty()) continue;
      if (s->job->cancelled()) {
        freed.push_back(i);
        continue;
      }
      try {
        prefill(*s, i);
      } catch (const std::exception& e) {
        fail(*s, failed(e));
        freed.push_back(i);
        cached_[i] = {};  // whatever the pass left, reuse nothing of it
      }
    }
    // 2. A token for each request past its prompt; those that go on decode together.
    std::vector<model::Model::SlotToken> rows;
    for (uint32_t i = 0; i < slots_.size() && !fatal; i++) {
      Slot* s = slots_[i].get();
      if (!s || s->next.empty() || std::find(freed.begin(), freed.end(), i) != freed.end()) continue;
      if (s->job->cancelled()) {
        std::fprintf(stderr, "gpt2vk: client gone: request dropped after %u of %u tokens\n",
                     s->generated, s->job->request.max_tokens);
        freed.push_back(i);
        continue;
      }
      try {
        if (pick(*s))
          rows.push_back({i, s->token});
        else
          freed.push_back(i);
      } catch (const std::exception& e) {
        fail(*s, failed(e));
        freed.push_back(i);
      }
    }
    if (!rows.empty() && !fatal) {
      try {
        const std::vector<float> out = model_.slot_decode(rows);
        metrics_.decode_pass(static_cast<uint32_t>(rows.size()));
        const size_t V = model_.config().n_vocab;
        for (size_t b = 0; b < rows.size(); b++) {
          slots_[rows[b].slot]->next.assign(out.begin() + long(b * V), out.begin() + long((b + 1) * V));
          cached_[rows[b].slot].ids.push_back(rows[b].id);
        }
      } catch (const std::exception& e) {
        const ApiError err = failed(e);
        for (const auto& row : rows) {
          fail(*slots_[row.slot], err);
          freed.push_back(row.slot);
          cached_[row.slot] = {};
        }
      }
    }
    // Free the finished; after a fatal error, everything.
    std::lock_guard lock(mutex_);
    for (uint32_t i = 0; i < slots_.size(); i++) {
      const bool done = std::find(freed.begin(), freed.end(), i) != freed.end();
      if (!slots_[i] || !(done || fatal)) continue;
      if (fatal && !done) fail(*slots_[i], *fatal);
      seconds_total_ += std::chrono::duration<double>(Clock::now() - slots_[i]->started).count();
      finished_++;
      slots_[i].reset();
      running_--;
    }
    if (failure_) {  // nothing waiting can run either
      for (auto& waiting : queue_)
        waiting->push(error_event(ApiError(503, "the server cannot generate any more: " + *failure_)));
      queue_.clear();
    }
    update_metrics();
    idle_.notify_all();
  }
}

}  // namespace app
