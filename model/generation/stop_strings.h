// Stop strings as OpenAI's API has them: the text ends right before the first one, which is not
// itself part of it. Streamed text that could begin a stop string waits until it cannot (or the
// stream ends), so nothing past a stop string ever goes out. `gpt2vk generate --stop` and the
// server's `stop` both stream through this.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace model {

class StopStrings {
 public:
  static constexpr size_t kMax = 4;  // what OpenAI's API takes (serve and generate --stop)

  explicit StopStrings(std::vector<std::string> stops);  // none empty; none at all: a pass-through

  // Appends `text` (whole characters, as Utf8Stream gives them): returns what can go out now,
  // which is all of it up to the first stop string once one is complete.
  std::string push(const std::string& text);
  // The end of the stream without a stop string: what was held back (nothing after a stop).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // not sent: the longest ending that begins some stop string
  bool stopped_ = false;
};

}  // namespace model
