// The server's embeddings queue (apps/serve/encode_queue.h) on an encoder that records each
// encode_batch and holds the first until the test lets it go, so that which requests wait
// together is the test's doing, not the scheduler's: the waiting requests go in arrival order,
// as many a round as `round_inputs` allows (a longer one alone), each gets its own rows back,
// and an error reaches only the request it belongs to.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "apps/serve/encode_queue.h"
#include "apps/serve/metrics.h"
#include "tests/model_fixture.h"

namespace {

class HeldEncoder final : public model::Encoder {
 public:
  HeldEncoder() {
    config_ = test::tiny_config();
    config_.family = model::Family::Encoder;
  }
  const model::Config& config() const override { return config_; }
  std::string device_name() const override { return "held"; }
  model::Precision precision() const override { return model::Precision::F32; }
  const std::vector<std::string>& warnings() const override { return none_; }
  void set_attention_taps(bool, std::optional<uint32_t>) override {}
  const std::vector<std::vector<float>>& attention_probs() const override { return probs_; }

  void release() {
    std::lock_guard lock(mutex_);
    held_ = false;
    cv_.notify_all();
  }
  std::vector<size_t> rounds() {
    std::lock_guard lock(mutex_);
    return rounds_;
  }

 protected:
  void run(std::span<const int32_t>, std::span<const int32_t>, bool, model::Encoded&) override {}
  // Each sequence's "hidden states": its first id, once. Id 99 fails the batch.
  void run_batch(std::span<const model::EncoderInput> inputs,
                 std::vector<std::vector<float>>& hidden) override {
    std::unique_lock lock(mutex_);
    rounds_.push_back(inputs.size());
    cv_.wait(lock, [&] { return !held_; });
    hidden.clear();
    for (const model::EncoderInput& in : inputs) {
      if (in.ids[0] == 99) throw std::runtime_error("id 99");
      hidden.push_back({static_cast<float>(in.ids[0])});
    }
  }

 private:
  model::Config config_;
  std::vector<std::string> none_;
  std::vector<std::vector<float>> probs_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool held_ = true;
  std::vector<size_t> rounds_;
};

}  // namespace

TEST_CASE("encode queue: rounds of the waiting requests in arrival order, bounded, errors apart") {
  HeldEncoder encoder;
  app::Metrics metrics;
  app::EncodeQueue queue(encoder, metrics, 5);
  // Request r's inputs: n sequences of one id each, 10 r + i (99: one that fails).
  const auto ids_of = [](int r, int n) {
    std::vector<std::vector<int32_t>> ids;
    for (int i = 0; i < n; i++) ids.push_back({10 * r + i});
    return ids;
  };
  const std::vector<int> sizes = {1, 3, 3, 2, 6};
  std::vector<std::vector<std::vector<int32_t>>> ids;
  for (size_t r = 0; r < sizes.size(); r++) ids.push_back(ids_of(int(r), sizes[r]));
  ids[3][1] = {99};
  std::vector<std::vector<std::vector<float>>> got(sizes.size());
  std::vector<std::string> errors(sizes.size());
  std::vector<std::thread> threads;
  const auto start = [&](size_t r) {
    threads.emplace_back([&, r] {
      std::vector<model::EncoderInput> in;
      for (const std::vector<int32_t>& one : ids[r]) in.push_back({one, {}});
      try {
        got[r] = queue.encode(in);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  };
  // Until `done` holds (each request queued before the next is sent: arrival order).
  const auto wait_for = [](auto done) {
    for (int i = 0; i < 30000 && !done(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(done());
  };
  start(0);  // runs alone, held
  wait_for([&] { return encoder.rounds().size() == 1; });
  for (size_t r = 1; r < sizes.size(); r++) {
    start(r);
    wait_for([&] { return queue.waiting() == r; });
  }
  encoder.release();
  for (std::thread& t : threads) t.join();

  // 1 | 3 (3 more would make 6 > 5) | 3 + 2 | 6 (over 5: alone); request 3's round failed and
  // was rerun request by request: 3, then 2.
  CHECK(encoder.rounds() == std::vector<size_t>{1, 3, 5, 3, 2, 6});
  for (size_t r = 0; r < sizes.size(); r++) {
    CAPTURE(r);
    if (r == 3) {
      CHECK(errors[r] == "id 99");
      continue;
    }
    CHECK(errors[r].empty());
    REQUIRE(got[r].size() == ids[r].size());
    for (size_t i = 0; i < ids[r].size(); i++) CHECK(got[r][i] == std::vector<float>{float(ids[r][i][0])});
  }
  // Rounds counted as they ran: the retry is part of its round.
  const std::string m = metrics.text();
  CHECK(m.find("gpt2vk_encode_rounds_total 4\n") != std::string::npos);
  CHECK(m.find("gpt2vk_encode_round_requests_total 5\n") != std::string::npos);
}
