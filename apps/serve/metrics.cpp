#include "apps/serve/metrics.h"

#include <charconv>
#include <cmath>

namespace app {

namespace {
// The shortest text that reads back as x, without an exponent where Prometheus' own Go
// clients write none: a bucket's bound is le="0.025" or le="0.0005", as a query writes it.
std::string number(double x) {
  char buf[64];
  const double a = std::fabs(x);
  const bool plain = a == 0 || (a >= 1e-4 && a < 1e21);
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x,
                                       plain ? std::chars_format::fixed : std::chars_format::scientific);
  return std::string(buf, end);
}

// The HELP and TYPE lines of a metric.
void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// A metric of one unlabelled sample.
void single(std::string& out, const std::string& name, const char* type, const char* help,
            uint64_t value) {
  header(out, name, type, help);
  out += name + " " + std::to_string(value) + "\n";
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
                               const char* help) const {
  header(out, name, "histogram", help);
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

void Metrics::cached_tokens(uint64_t prompt) {
  std::lock_guard lock(mutex_);
  cached_tokens_ += prompt;
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

void Metrics::encode_round(uint32_t requests) {
  std::lock_guard lock(mutex_);
  encode_rounds_++;
  encode_round_requests_ += requests;
}

void Metrics::seq2seq_round(uint32_t requests) {
  std::lock_guard lock(mutex_);
  seq2seq_rounds_++;
  seq2seq_round_requests_ += requests;
}

std::string Metrics::text() const {
  std::lock_guard lock(mutex_);
  std::string out;
  header(out, "gpt2vk_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [key, n] : requests_)
    out += "gpt2vk_requests_total{endpoint=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  single(out, "gpt2vk_prompt_tokens_total", "counter", "Prompt tokens of completed requests.",
         prompt_tokens_);
  single(out, "gpt2vk_prompt_tokens_cached_total", "counter",
         "Prompt tokens of completed requests taken from a slot's cache, not computed.",
         cached_tokens_);
  single(out, "gpt2vk_completion_tokens_total", "counter", "Tokens generated.", completion_tokens_);
  single(out, "gpt2vk_queue_length", "gauge", "Requests waiting for a slot.", waiting_);
  single(out, "gpt2vk_requests_running", "gauge", "Requests holding a slot.", running_);
  single(out, "gpt2vk_decode_passes_total", "counter", "Forward passes that decoded tokens.",
         decode_passes_);
  single(out, "gpt2vk_decode_rows_total", "counter",
         "Tokens those passes decoded (rows / passes: the mean batch).", decode_rows_);
  single(out, "gpt2vk_encode_rounds_total", "counter",
         "Rounds of the encoder that served embeddings requests together.", encode_rounds_);
  single(out, "gpt2vk_encode_round_requests_total", "counter",
         "Embeddings requests those rounds encoded (requests / rounds: the mean batch).",
         encode_round_requests_);
  single(out, "gpt2vk_seq2seq_rounds_total", "counter",
         "Rounds of the encoder-decoder that served completions requests together.",
         seq2seq_rounds_);
  single(out, "gpt2vk_seq2seq_round_requests_total", "counter",
         "Completions requests those rounds generated for (requests / rounds: the mean batch).",
         seq2seq_round_requests_);
  first_token_.write(out, "gpt2vk_time_to_first_token_seconds",
                     "From a request's arrival to its first generated token.");
  per_token_.write(out, "gpt2vk_time_per_output_token_seconds",
                   "Between consecutive generated tokens of one request.");
  return out;
}

}  // namespace app
