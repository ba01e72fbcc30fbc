// Helpers every op test relies on: fp16 conversion, the CPU activations, binding windows.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "model/ops/cpu/common.h"
#include "model/ops/gpu/common.h"

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
    CHECK(from_half(model::gpu::to_half(x)) == model::cpu::round_to_half(x));
  }
  CHECK(model::cpu::round_to_half(1.00048828125f) == 1.0f);          // tie: to even
  CHECK(model::cpu::round_to_half(1.00146484375f) == 1.001953125f);  // tie: to even (up)
  CHECK(std::isinf(model::cpu::round_to_half(65520.0f)));
  CHECK(model::cpu::round_to_half(65519.0f) == 65504.0f);
  CHECK(model::cpu::round_to_half(2.98023223876953125e-8f) == 0.0f);  // 2^-25: tie to even (zero)
  // Every half bit pattern round-trips.
  for (uint32_t h = 0; h < 0x7c00; h++) {
    float f = from_half(static_cast<uint16_t>(h));
    REQUIRE(model::gpu::to_half(f) == h);
    REQUIRE(model::cpu::round_to_half(f) == f);
  }
}

TEST_CASE("CPU activations") {
  CHECK(model::cpu::activate(-1.0, model::Activation::Relu) == 0.0);
  CHECK(model::cpu::activate(2.0, model::Activation::None) == 2.0);
  CHECK(model::cpu::activate(1.0, model::Activation::GeluErf) == doctest::Approx(0.8413447460685429));
  CHECK(model::cpu::activate(1.0, model::Activation::GeluTanh) == doctest::Approx(0.8411919906082768));
}

TEST_CASE("model::gpu::window starts aligned, skips to the first element, ends on a whole word") {
  const vk::BufferSpan s{VK_NULL_HANDLE, 256, 8192, nullptr};
  // fp32 rows of 301 floats, alignment 64: rows 3 and 4 are bytes [3612, 6020); the binding
  // starts at 3584, 7 floats early.
  model::gpu::Window w = model::gpu::window(s, 3 * 301, 2 * 301, sizeof(float), 64);
  CHECK(w.span.offset == 256 + 3584);
  CHECK(w.span.size == 6020 - 3584);
  CHECK(w.skip == 7);
  // fp16, alignment 16: elements [75, 101) are bytes [150, 202), rounded up to the word at 204.
  w = model::gpu::window(s, 75, 26, 2, 16);
  CHECK(w.span.offset == 256 + 144);
  CHECK(w.span.size == 204 - 144);
  CHECK(w.skip == 3);
  // ...but never past the end of the span: 101 halves end at byte 202.
  w = model::gpu::window(s.sub(0, 202), 100, 1, 2, 16);
  CHECK(w.span.offset == 256 + 192);
  CHECK(w.span.size == 202 - 192);
  CHECK(w.skip == 4);
}
