#include "apps/serve_metrics.h"

#include <cstdio>

namespace app {

namespace {
std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}
}  // namespace

void Metrics::Histogram::add(double x) {
  size_t i = 0;
  while (i < bounds.size() && x > bounds[i]) i++;
  counts[i]++;
  count++;
  sum += x;
}

void Metrics::Histogram::write(std::string& out, const std::string& name,
                               const std::string& help) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds.size(); i++) {
    cumulative += counts[i];
    const std::string le = i < bounds.size() ? number(bounds[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum " + number(sum) + "\n" + name + "_count " + std::to_string(count) + "\n";
}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  requests_[{endpoint, status}]++;
}

void Metrics::tokens(uint64_t prompt, uint64_t completion) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt;
  completion_tokens_ += completion;
}

void Metrics::first_token(double seconds) {
  std::lock_guard lock(mutex_);
  first_token_.add(seconds);
}

void Metrics::per_token(double seconds) {
  std::lock_guard lock(mutex_);
  per_token_.add(seconds);
}

void Metrics::set_queue(uint32_t waiting, uint32_t running) {
  std::lock_guard lock(mutex_);
  waiting_ = waiting;
  running_ = running;
}

void Metrics::decode_pass(uint32_t rows) {
  std::lock_guard lock(mutex_);
  decode_passes_++;
  decode_rows_ += rows;
}

std::string Metrics::text() const {
  std::lock_guard lock(mutex_);
  std::string out;
  out += "# HELP gpt2vk_requests_total HTTP requests answered, by endpoint and status.\n"
         "# TYPE gpt2vk_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += "gpt2vk_requests_total{endpoint=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  out += "# HELP gpt2vk_prompt_tokens_total Prompt tokens of completed requests.\n"
         "# TYPE gpt2vk_prompt_tokens_total counter\n"
         "gpt2vk_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  out += "# HELP gpt2vk_completion_tokens_total Tokens generated.\n"
         "# TYPE gpt2vk_completion_tokens_total counter\n"
         "gpt2vk_completion_tokens_total " + std::to_string(completion_tokens_) + "\n";
  out += "# HELP gpt2vk_queue_length Requests waiting for a slot.\n"
         "# TYPE gpt2vk_queue_length gauge\n"
         "gpt2vk_queue_length " + std::to_string(waiting_) + "\n";
  out += "# HELP gpt2vk_requests_running Requests holding a slot.\n"
         "# TYPE gpt2vk_requests_running gauge\n"
         "gpt2vk_requests_running " + std::to_string(running_) + "\n";
  out += "# HELP gpt2vk_decode_passes_total Forward passes that decoded tokens.\n"
         "# TYPE gpt2vk_decode_passes_total counter\n"
         "gpt2vk_decode_passes_total " + std::to_string(decode_passes_) + "\n";
  out += "# HELP gpt2vk_decode_rows_total Tokens those passes decoded (rows / passes: the mean batch).\n"
         "# TYPE gpt2vk_decode_rows_total counter\n"
         "gpt2vk_decode_rows_total " + std::to_string(decode_rows_) + "\n";
  first_token_.write(out, "gpt2vk_time_to_first_token_seconds",
                     "From a request's arrival to its first generated token.");
  per_token_.write(out, "gpt2vk_time_per_output_token_seconds",
                   "Between consecutive generated tokens of one request.");
  return out;
}

}  // namespace app
