// One comparison helper for every op test: |got - ref| <= atol + rtol * |ref| elementwise. On
// failure it reports the first mismatches, the largest error and where it is.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace test {

struct Tolerance {
  double atol;
  double rtol;
};

// True when every element is within tolerance; otherwise prints a report through doctest.
bool close(const std::string& what, std::span<const float> got, std::span<const float> ref,
           Tolerance tol);

// n floats uniform in [lo, hi), reproducible from seed.
std::vector<float> random_floats(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f);

}  // namespace test
