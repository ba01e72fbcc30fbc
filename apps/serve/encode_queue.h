// The embeddings requests' encoder, shared: requests that arrive while it runs wait together,
// and the next round encodes all of their inputs in one Encoder::encode_batch, passes of
// several requests' texts where one request's would pad a pass alone. Nobody waits for a batch
// to fill: a round starts as soon as the encoder is free, with whatever has arrived. A text's
// embedding is the same bits in any round (encode_batch's promise), so batching changes when an
// answer comes, never what it is.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <vector>

#include "apps/serve/metrics.h"
#include "model/forward/encoder.h"

namespace app {

class EncodeQueue {
 public:
  // Each round is counted in `metrics` (gpt2vk_encode_rounds_total and its requests). A round
  // takes the waiting requests in arrival order while their inputs come to at most
  // `round_inputs` (a longer request alone), so that what a round holds (the inputs' hidden
  // states until they are pooled) is bounded as one request's is, however many wait.
  EncodeQueue(model::Encoder& encoder, Metrics& metrics, size_t round_inputs)
      : encoder_(encoder), metrics_(metrics), round_inputs_(round_inputs) {}

  // The hidden states of `inputs` (encode_batch's), encoded in a round with whatever other
  // requests wait; blocks until they are done. A round that fails is retried request by
  // request, so an error reaches the request it belongs to only.
  std::vector<std::vector<float>> encode(std::span<const model::EncoderInput> inputs);

  // Requests waiting for a round (not those in the one running).
  size_t waiting() const;

 private:
  struct Job {
    std::span<const model::EncoderInput> inputs;
    std::vector<std::vector<float>> hidden;
    std::exception_ptr error;
    bool done = false;
  };
  void run_round(std::vector<Job*>& jobs);  // without the lock

  model::Encoder& encoder_;
  Metrics& metrics_;
  const size_t round_inputs_;
  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::deque<Job*> waiting_;
  bool busy_ = false;  // a round is running
};

}  // namespace app
