#include "apps/serve/encode_queue.h"

namespace app {

std::vector<std::vector<float>> EncodeQueue::encode(std::span<const model::EncoderInput> inputs) {
  Job job{inputs, {}, nullptr, false};
  std::unique_lock lock(mutex_);
  waiting_.push_back(&job);
  while (!job.done) {
    if (busy_) {
      done_.wait(lock);
      continue;
    }
    // The encoder is free: this request runs the round, for those waiting longest (itself
    // among them, or in a later round it runs too).
    busy_ = true;
    std::vector<Job*> round;
    size_t taken = 0;  // inputs
    while (!waiting_.empty() &&
           (round.empty() || taken + waiting_.front()->inputs.size() <= round_inputs_)) {
      taken += waiting_.front()->inputs.size();
      round.push_back(waiting_.front());
      waiting_.pop_front();
    }
    lock.unlock();
    run_round(round);
    metrics_.encode_round(static_cast<uint32_t>(round.size()));
    lock.lock();
    busy_ = false;
    done_.notify_all();
  }
  if (job.error) std::rethrow_exception(job.error);
  return std::move(job.hidden);
}

void EncodeQueue::run_round(std::vector<Job*>& jobs) {
  // Each job's outcome is written before its done flag, which the waiters read under the lock.
  const auto finish = [&](Job* j, std::vector<std::vector<float>> hidden, std::exception_ptr e) {
    std::lock_guard lock(mutex_);
    j->hidden = std::move(hidden);
    j->error = e;
    j->done = true;
  };
  std::vector<model::EncoderInput> all;
  for (const Job* j : jobs) all.insert(all.end(), j->inputs.begin(), j->inputs.end());
  try {
    std::vector<std::vector<float>> hidden = encoder_.encode_batch(all);
    size_t at = 0;
    for (Job* j : jobs) {
      const auto first = hidden.begin() + static_cast<std::ptrdiff_t>(at);
      at += j->inputs.size();
      finish(j,
             {std::make_move_iterator(first),
              std::make_move_iterator(hidden.begin() + static_cast<std::ptrdiff_t>(at))},
             nullptr);
    }
    return;
  } catch (...) {
    if (jobs.size() == 1) return finish(jobs[0], {}, std::current_exception());
  }
  // One request's error is its own: each alone (the device lost fails them all anyway).
  for (Job* j : jobs) {
    try {
      finish(j, encoder_.encode_batch(j->inputs), nullptr);
    } catch (...) {
      finish(j, {}, std::current_exception());
    }
  }
}

size_t EncodeQueue::waiting() const {
  std::lock_guard lock(mutex_);
  return waiting_.size();
}

}  // namespace app
