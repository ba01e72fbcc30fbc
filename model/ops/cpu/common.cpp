#include "model/ops/cpu/common.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace model::cpu {

float round_to_half(float x) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  const uint32_t sign = f & 0x80000000u, abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) return x;  // inf, nan
  if (abs >= 0x477ff000u) return std::copysign(INFINITY, x);  // rounds past 65504
  if (abs < 0x38800000u) {
    // Below binary16's smallest normal (2^-14) halves are multiples of 2^-24: scaling by a power
    // of two is exact, and nearbyint rounds to nearest even.
    return std::nearbyint(x * 16777216.0f) / 16777216.0f;
  }
  // Normal range: keep 10 of the 23 mantissa bits, rounding to nearest even (a carry into the
  // exponent is the correct result).
  const uint32_t drop = 13, mask = (1u << drop) - 1, half = 1u << (drop - 1);
  uint32_t rem = abs & mask, keep = abs & ~mask;
  if (rem > half || (rem == half && (keep & (1u << drop)))) keep += 1u << drop;
  keep |= sign;
  float out;
  std::memcpy(&out, &keep, 4);
  return out;
}

}  // namespace model::cpu
