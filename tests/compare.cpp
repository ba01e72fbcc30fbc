#include "tests/compare.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <sstream>

namespace test {

bool close(const std::string& what, std::span<const float> got, std::span<const float> ref,
           Tolerance tol) {
  if (got.size() != ref.size()) {
    FAIL_CHECK(what << ": " << got.size() << " values, reference has " << ref.size());
    return false;
  }
  size_t bad = 0, worst = 0;
  double worst_err = -1;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); i++) {
    double g = got[i], r = ref[i];
    double err = std::fabs(g - r);
    if (std::isnan(g) != std::isnan(r)) err = INFINITY;
    if (err > worst_err) worst_err = err, worst = i;
    if (!(err <= tol.atol + tol.rtol * std::fabs(r))) {
      if (bad < 5) first << "\n  [" << i << "] gpu " << g << " ref " << r << " |d| " << err;
      bad++;
    }
  }
  if (bad) {
    FAIL_CHECK(what << ": " << bad << " of " << got.size() << " values outside atol " << tol.atol
                    << " + rtol " << tol.rtol << "; max |d| " << worst_err << " at [" << worst
                    << "]" << first.str());
  }
  return bad == 0;
}

std::vector<float> random_floats(size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace test
