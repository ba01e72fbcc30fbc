// Checks of option values that say what is allowed. CLI11 converts a value only after its
// validators ran, so a check here answers first: "--port: must be a whole number from 0 to
// 65535 (0: any free port), got 99999" where CLI11 alone would say "Could not convert".
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace app {

// A whole number from lo to hi, in decimal; `note` follows the range in the message (" (0: any
// free port)"). The value reaches CLI11 in plain decimal, which would read "010" as octal.
CLI::Validator whole_number(int64_t lo, uint64_t hi, const std::string& note = "");

// A finite decimal number from lo to hi ("--presence-penalty: must be a number from -2 to 2,
// got 3"); with `above_lo`, lo itself is refused ("greater than 0"), and an infinite hi is no
// bound.
CLI::Validator real_number(double lo, double hi, bool above_lo = false);

}  // namespace app
