#include "apps/options.h"

#include <charconv>

namespace app {

CLI::Validator whole_number(int64_t lo, uint64_t hi, const std::string& note) {
  const std::string range = "from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [=](std::string& in) -> std::string {
        const char* first = in.data();
        const char* last = in.data() + in.size();
        bool ok = false;
        if (!in.empty() && in[0] == '-') {
          int64_t v = 0;
          const auto r = std::from_chars(first, last, v);
          ok = r.ec == std::errc() && r.ptr == last && v >= lo;
          if (ok) in = std::to_string(v);
        } else {
          uint64_t v = 0;
          const auto r = std::from_chars(first, last, v);
          ok = r.ec == std::errc() && r.ptr == last && v <= hi && (lo <= 0 || v >= uint64_t(lo));
          if (ok) in = std::to_string(v);
        }
        if (ok) return {};
        return "must be a whole number " + range + note + ", got " + (in.empty() ? "nothing" : in);
      },
      // --help shows a range, but not one that is only the type's own.
      hi < UINT32_MAX ? "in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]" : "");
}

}  // namespace app
