// `gpt2vk serve`'s /metrics: counters, gauges and latency histograms in Prometheus' text
// exposition format (version 0.0.4). Every method is thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace app {

class Metrics {
 public:
  void request(const std::string& endpoint, int status);  // one answered request
  void tokens(uint64_t prompt, uint64_t completion);
  void cached_tokens(uint64_t prompt);  // prompt tokens a request took from a slot's cache
  void first_token(double seconds);  // from the request's arrival to its first new token
  void per_token(double seconds);    // between consecutive new tokens of one request
  void set_queue(uint32_t waiting, uint32_t running);
  void decode_pass(uint32_t rows);  // one pass that decoded a token for `rows` requests
  void encode_round(uint32_t requests);  // one encode_batch for `requests` embeddings requests
  // One round of an encoder-decoder's completions for `requests` requests (Seq2SeqRunner).
  void seq2seq_round(uint32_t requests);
  std::string text() const;

 private:
  struct Histogram {
    std::vector<double> bounds;      // upper bounds, ascending; +Inf implied
    std::vector<uint64_t> counts;    // per bucket (not cumulative)
    uint64_t count = 0;
    double sum = 0;
    explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1) {}
    void add(double x);
    void write(std::string& out, const std::string& name, const char* help) const;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, completion_tokens_ = 0, cached_tokens_ = 0;
  uint32_t waiting_ = 0, running_ = 0;
  uint64_t decode_passes_ = 0, decode_rows_ = 0;
  uint64_t encode_rounds_ = 0, encode_round_requests_ = 0;
  uint64_t seq2seq_rounds_ = 0, seq2seq_round_requests_ = 0;
  // Bounds in seconds, from what was measured (docs/serving.md, "Metrics"): a token of the
  // default model takes about 1 ms on lavapipe and less on a GPU, one of GPT-2 small 20 ms on
  // lavapipe; a first token waits for the queue and the prompt's pass too.
  Histogram first_token_{{0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram per_token_{{0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
};

}  // namespace app
