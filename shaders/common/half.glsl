// fp32 -> fp16 for what the shaders store as fp16 (the KV cache): rounded to nearest even in
// integer arithmetic, bit for bit model::f32_to_f16 and cpu::round_to_half. packHalf2x16's
// rounding is the driver's (toward zero on some), and a cache must hold the same halves on every
// device and in the CPU reference. Widening back (unpackHalf2x16) is exact everywhere.
uint half_bits(float value) {
  const uint x = floatBitsToUint(value);
  const uint sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | ((a >> 13) & 0x3ffu);  // NaN stays a NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // infinite, or rounds past 65504
  if (a >= 0x38800000u) {                       // normal (>= 2^-14): rebias, round 13 bits off
    const uint r = a - 0x38000000u;
    return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal: zero
  // Subnormal: the mantissa with its leading 1, shifted by 14..24 bits, rounded to nearest even
  // (a carry into 0x400 is the smallest normal's encoding).
  const uint mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
  const uint rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  uint q = mant >> shift;
  if (rem > halfway || (rem == halfway && (q & 1u) != 0u)) q++;
  return sign | q;
}

// Two values as packHalf2x16 lays them out (x in the low half), rounded as half_bits.
uint pack_halves(vec2 v) {
  return half_bits(v.x) | (half_bits(v.y) << 16);
}
