#include "apps/serve_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "model/generation/sampler.h"
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
               uint32_t max_queue, std::function<bool()> device_lost)
    : model_(model),
      tokenizer_(tokenizer),
      metrics_(metrics),
      max_queue_(max_queue),
      device_lost_(std::move(device_lost)),
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
  return static_cast<uint32_t>(std::clamp(std::ceil(mean * double(queue_.size() + 1)), 1.0, 3600.0));
}

void Engine::drain() {
  std::unique_lock lock(mutex_);
  draining_ = true;
  for (auto& job : queue_) {
    Event e;
    e.done = true;
    e.error = ApiError(503, "the server is shutting down");
    job->push(std::move(e));
  }
  queue_.clear();
  update_metrics();
  idle_.wait(lock, [&] { return !running_; });
}

void Engine::update_metrics() {
  metrics_.set_queue(static_cast<uint32_t>(queue_.size()), running_ ? 1 : 0);
}

void Engine::loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    std::shared_ptr<Job> job = queue_.front();
    queue_.pop_front();
    running_ = true;
    update_metrics();
    lock.unlock();
    const Clock::time_point start = Clock::now();
    std::optional<ApiError> error;
    try {
      if (!job->cancelled()) run(*job);
    } catch (const ApiError& e) {
      error = e;
    } catch (const std::exception& e) {
      // A lost device ends all generation; anything else fails only this request.
      if (device_lost_ && device_lost_()) {
        std::lock_guard relock(mutex_);
        failure_ = std::string("the GPU failed: ") + e.what();
        error = ApiError(503, *failure_);
      } else {
        error = ApiError(500, std::string("generation failed: ") + e.what());
      }
    }
    if (error) {
      Event e;
      e.done = true;
      e.error = *error;
      job->push(std::move(e));
    }
    lock.lock();
    seconds_total_ += std::chrono::duration<double>(Clock::now() - start).count();
    finished_++;
    running_ = false;
    if (failure_) {  // nothing waiting can run either
      for (auto& waiting : queue_) {
        Event e;
        e.done = true;
        e.error = ApiError(503, "the server cannot generate any more: " + *failure_);
        waiting->push(std::move(e));
      }
      queue_.clear();
    }
    update_metrics();
    idle_.notify_all();
  }
}

namespace {

// log-softmax of one position's logits at temperature 1 (what the model predicts, before any
// sampling cut): the chosen id's log-probability and the best n, best first (ties to the lower
// id), accumulated in double.
TokenLogprob logprob_of(std::span<const float> logits, int32_t id, uint32_t n) {
  double top = -INFINITY;
  for (float x : logits) top = std::max(top, double(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - top);
  const double norm = top + std::log(sum);
  TokenLogprob t;
  t.id = id;
  t.logprob = double(logits[size_t(id)]) - norm;
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t keep = std::min<size_t>(n, order.size());
  std::partial_sort(order.begin(), order.begin() + long(keep), order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < keep; i++)
    t.top.emplace_back(order[i], double(logits[size_t(order[i])]) - norm);
  return t;
}

// How many bytes of `text` can go out now: up to the first stop string (found: *stopped), or all
// but its longest ending that begins some stop string (it may yet complete one).
size_t sendable(const std::string& text, const std::vector<std::string>& stops, bool* stopped) {
  size_t first = std::string::npos;
  for (const std::string& s : stops) first = std::min(first, text.find(s));
  if (first != std::string::npos) {
    *stopped = true;
    return first;
  }
  size_t held = 0;
  for (const std::string& s : stops)
    for (size_t k = std::min(s.size() - 1, text.size()); k > held; k--)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        held = k;
        break;
      }
  return text.size() - held;
}

}  // namespace

void Engine::run(Job& job) {
  const CompletionRequest& r = job.request;
  const model::Config& c = model_.config();
  model::SamplerOptions so = r.sampling;
  if (!r.seed_given) so.seed = std::random_device{}();
  model::Sampler sampler(so);
  // Log-probabilities need every logit of a position; otherwise what sampling needs.
  const bool with_logprobs = r.logprobs.has_value();
  const uint32_t n_top = r.logprobs.value_or(0);
  const uint32_t k = with_logprobs ? 0 : sampler.candidates(c.n_vocab);

  model_.reset();
  model::Candidates cand;
  Event head;  // the echoed prompt, with its tokens' log-probabilities
  if (r.echo) head.text = r.prompt_text;
  if (r.echo && with_logprobs) {
    // Every prompt row's logits in one pass: row t predicts token t + 1.
    const std::vector<float> all = model_.logits(r.prompt);
    const size_t V = c.n_vocab;
    head.logprobs.push_back({r.prompt[0], std::nullopt, {}});
    for (size_t t = 1; t < r.prompt.size(); t++)
      head.logprobs.push_back(
          logprob_of(std::span(all).subspan((t - 1) * V, V), r.prompt[t], n_top));
    cand.logits.assign(all.end() - long(V), all.end());
  } else {
    cand = model_.next(r.prompt, k);
  }
  if (!head.text.empty() || !head.logprobs.empty()) job.push(std::move(head));

  model::Utf8Stream utf8;
  std::string text;  // the completion so far, whole characters
  size_t sent = 0;
  uint32_t generated = 0;
  bool stopped = false;
  std::string finish = "length";
  std::vector<TokenLogprob> pending;  // log-probabilities not yet sent
  Clock::time_point last = Clock::now();
  while (generated < r.max_tokens) {
    if (job.cancelled()) {
      std::fprintf(stderr, "gpt2vk: client gone: request dropped after %u of %u tokens\n",
                   generated, r.max_tokens);
      return;
    }
    const int32_t id = sampler.pick(cand);
    if (c.eos_token_id && id == *c.eos_token_id) {
      finish = "stop";
      break;
    }
    if (with_logprobs) pending.push_back(logprob_of(cand.logits, id, n_top));
    generated++;
    const Clock::time_point now = Clock::now();
    if (generated == 1)
      metrics_.first_token(std::chrono::duration<double>(now - job.arrived).count());
    else
      metrics_.per_token(std::chrono::duration<double>(now - last).count());
    last = now;
    text += utf8.push(tokenizer_.token_bytes(id));
    const size_t upto = sendable(text, r.stop, &stopped);
    if (upto > sent || !pending.empty()) {
      Event e;
      e.text = text.substr(sent, upto - sent);
      e.logprobs = std::move(pending);
      pending.clear();
      sent = upto;
      job.push(std::move(e));
    }
    if (stopped) {
      finish = "stop";
      break;
    }
    if (generated == r.max_tokens) break;
    const int32_t one[] = {id};
    cand = model_.next(one, k);
  }
  // The end: an unfinished character as U+FFFD, and what was held back for the stop strings.
  Event done;
  if (!stopped) {
    text += utf8.finish();
    const size_t upto = std::max(sent, sendable(text, r.stop, &stopped));
    done.text = text.substr(sent, (stopped ? upto : text.size()) - sent);
    if (stopped) finish = "stop";
  }
  done.logprobs = std::move(pending);
  done.done = true;
  done.finish_reason = finish;
  done.prompt_tokens = static_cast<uint32_t>(r.prompt.size());
  done.completion_tokens = generated;
  metrics_.tokens(r.prompt.size(), generated);
  job.push(std::move(done));
}

}  // namespace app
