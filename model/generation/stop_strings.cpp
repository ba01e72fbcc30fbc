#include "model/generation/stop_strings.h"

#include <algorithm>
#include <stdexcept>

namespace model {

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_)
    if (s.empty()) throw std::runtime_error("a stop string may not be empty");
}

std::string StopStrings::push(const std::string& text) {
  if (stopped_) return {};
  // Only held_ and the new text need searching: a stop string that began in text already sent
  // would have its beginning in held_ (the longest ending that begins one).
  held_ += text;
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  size_t keep = 0;  // the longest ending of held_ that is a proper beginning of a stop string
  for (const std::string& s : stops_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; k--)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStrings::finish() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace model
