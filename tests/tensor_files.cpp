#include "tests/tensor_files.h"

#include <bit>
#include <cmath>
#include <limits>

namespace test {

double f16_value(uint16_t bits) {
  const int s = bits >> 15, e = (bits >> 10) & 31, m = bits & 1023;
  const double sign = s ? -1.0 : 1.0;
  if (e == 31)
    return m ? std::numeric_limits<double>::quiet_NaN()
             : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

namespace {

// Of two neighbouring representable values lo < hi around |x|, the nearest; ties to the one
// with an even last bit.
template <class Bits>
Bits pick(double ax, double lo, Bits lo_bits, double hi, Bits hi_bits) {
  const double dlo = ax - lo, dhi = hi - ax;
  if (dlo < dhi) return lo_bits;
  if (dhi < dlo) return hi_bits;
  return (lo_bits & 1) == 0 ? lo_bits : hi_bits;
}

}  // namespace

uint16_t nearest_f16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return 0x7e00;
  const double ax = std::fabs(static_cast<double>(x));
  if (ax >= 65520.0) return sign | 0x7c00;  // halfway between 65504 and 2^16 and beyond: inf
  // Largest positive finite pattern whose value is <= ax (values grow with the bit pattern).
  uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {
    const auto mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (f16_value(mid) <= ax)
      lo = mid;
    else
      hi = static_cast<uint16_t>(mid - 1);
  }
  if (f16_value(lo) == ax || lo == 0x7bff) return sign | lo;
  const auto up = static_cast<uint16_t>(lo + 1);
  return sign | pick<uint16_t>(ax, f16_value(lo), lo, f16_value(up), up);
}

uint16_t nearest_bf16(float x) {
  if (std::isnan(x)) return 0x7fc0;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const auto lo = static_cast<uint16_t>((bits & 0x7fffffff) >> 16);  // truncation: <= |x|
  const double ax = std::fabs(static_cast<double>(x));
  const double lo_v = std::bit_cast<float>(static_cast<uint32_t>(lo) << 16);
  if (lo_v == ax || lo == 0x7f80) return sign | lo;
  const auto up = static_cast<uint16_t>(lo + 1);
  // The pattern after the largest finite is infinity; it wins where 2^128 would.
  const double up_v = up == 0x7f80 ? std::ldexp(1.0, 128)
                                   : static_cast<double>(std::bit_cast<float>(uint32_t{up} << 16));
  return sign | pick<uint16_t>(ax, lo_v, lo, up_v, up);
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

std::string safetensors_bytes(std::string_view header, std::string_view data) {
  return le64(header.size()) + std::string(header) + std::string(data);
}

}  // namespace test
