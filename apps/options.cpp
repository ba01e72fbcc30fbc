#include "apps/options.h"

#include <charconv>
#include <cmath>
#include <sstream>

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

CLI::Validator real_number(double lo, double hi, bool above_lo) {
  const auto text = [](double x) {
    std::ostringstream o;
    o << x;
    return o.str();
  };
  std::string range = above_lo ? "greater than " + text(lo) : "from " + text(lo);
  if (std::isfinite(hi)) range += (above_lo ? " and at most " : " to ") + text(hi);
  return CLI::Validator(
      [=](std::string& in) -> std::string {
        double v = 0;
        const auto r = std::from_chars(in.data(), in.data() + in.size(), v);
        const bool number = !in.empty() && r.ec == std::errc() && r.ptr == in.data() + in.size();
        if (number && std::isfinite(v) && (above_lo ? v > lo : v >= lo) && v <= hi) return {};
        return "must be a number " + range + ", got " + (in.empty() ? "nothing" : in);
      },
      (above_lo ? "in (" : "in [") + text(lo) + " - " +
          (std::isfinite(hi) ? text(hi) + "]" : "inf)"));
}

}  // namespace app
