#include "model/text/stop_strings.h"

#include <algorithm>

namespace model {

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

}  // namespace model
