// Helpers every op test relies on: fp16 conversion and the CPU activations.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "model/cpu/common.h"
#include "model/gpu/common.h"

namespace {

float from_half(uint16_t h) {  // exact: every binary16 value is a float
  int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float mag = exp == 0    ? std::ldexp(static_cast<float>(mant), -24)
              : exp == 31 ? (mant ? NAN : INFINITY)
                          : std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  return (h & 0x8000) ? -mag : mag;
}

}  // namespace

TEST_CASE("fp16 rounding agrees between the weight packer and the CPU reference") {
  const float cases[] = {0.0f, -0.0f, 1.0f, -2.5f, 0.1f, 65504.0f, 65519.0f, 65520.0f, 1e-5f,
                         6.1e-5f, 5.96e-8f, 2.9e-8f, 3.0e-8f, 1e-9f, 1.00048828125f, 1.00146484375f,
                         123.456f, -7.77e-3f};
  for (float x : cases) {
    CAPTURE(x);
    CHECK(from_half(gpu::to_half(x)) == cpu::round_to_half(x));
  }
  CHECK(cpu::round_to_half(1.00048828125f) == 1.0f);          // tie: to even
  CHECK(cpu::round_to_half(1.00146484375f) == 1.001953125f);  // tie: to even (up)
  CHECK(std::isinf(cpu::round_to_half(65520.0f)));
  CHECK(cpu::round_to_half(65519.0f) == 65504.0f);
  CHECK(cpu::round_to_half(2.98023223876953125e-8f) == 0.0f);  // 2^-25: tie to even (zero)
  // Every half bit pattern round-trips.
  for (uint32_t h = 0; h < 0x7c00; h++) {
    float f = from_half(static_cast<uint16_t>(h));
    REQUIRE(gpu::to_half(f) == h);
    REQUIRE(cpu::round_to_half(f) == f);
  }
}

TEST_CASE("CPU activations") {
  CHECK(cpu::activate(-1.0, gpu::Activation::Relu) == 0.0);
  CHECK(cpu::activate(2.0, gpu::Activation::None) == 2.0);
  CHECK(cpu::activate(1.0, gpu::Activation::GeluErf) == doctest::Approx(0.8413447460685429));
  CHECK(cpu::activate(1.0, gpu::Activation::GeluTanh) == doctest::Approx(0.8411919906082768));
}
