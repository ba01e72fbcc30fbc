// Element types of safetensors files and the conversions between them (fp32, fp16, bf16).
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "model/formats/safetensors.h"
#include "model/formats/dtype.h"

namespace model {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

const char* dtype_name(TensorDType t) {
  switch (t) {
    case TensorDType::F32:
      return "F32";
    case TensorDType::F16:
      return "F16";
    case TensorDType::BF16:
      return "BF16";
  }
  return "?";
}

size_t dtype_size(TensorDType t) {
  return t == TensorDType::F32 ? 4 : 2;
}

uint64_t TensorView::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // SafeTensors::open has checked that this does not overflow
  return n;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in fp32
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));  // rebias 15 -> 127
}

float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t f32_to_f16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u)  // NaN: keep the top payload bits, force quiet so it stays a NaN
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (abs >= 0x38800000u) {  // normal in fp16 (>= 2^-14): rebias, round the 13 dropped bits
    uint32_t r = abs - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (abs < 0x33000000u) return sign;  // below 2^-25 (half the smallest subnormal): zero
  // Subnormal: value / 2^-24 = mant * 2^(exp - 126), rounded to nearest even. A carry into
  // 0x400 is the smallest normal, which the bit pattern already encodes.
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - (abs >> 23);  // 14..24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

uint16_t f32_to_bf16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  // Round to nearest even on the 16 dropped bits; a carry out of the largest finite is inf.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

namespace {

// Element range check that cannot overflow, against both the shape and the bytes present.
void check_range(const TensorView& t, uint64_t first, uint64_t count) {
  const uint64_t n = t.bytes.size() / dtype_size(t.dtype);
  if (first > n || count > n - first || count > t.elements() || first > t.elements() - count)
    throw std::out_of_range(t.name + ": elements [" + std::to_string(first) + ", +" +
                            std::to_string(count) + ") out of range");
}

uint16_t load16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);  // data offsets need not be aligned
  return v;
}

// Copies `count` values of `Bits` from src to dst and counts those with all `mask` bits set (an
// all-ones exponent: NaN or infinity). Chunks pass through a buffer that stays in L1, so the
// count is a vectorised loop that adds no pass over memory, and dst (maybe uncached mapped
// device memory) is only written.
template <class Bits>
uint64_t copy_counting(void* dst, const std::byte* src, uint64_t count, Bits mask) {
  constexpr uint64_t kChunk = 4096;
  Bits local[kChunk] = {};
  uint64_t bad = 0;
  for (uint64_t i = 0; i < count; i += kChunk) {
    const uint64_t n = std::min(kChunk, count - i);
    std::memcpy(local, src + i * sizeof(Bits), n * sizeof(Bits));
    if (n < kChunk) std::memset(local + n, 0, (kChunk - n) * sizeof(Bits));
    // A fixed trip count: what -O2's cheap vectoriser takes.
    Bits chunk_bad = 0;  // at most kChunk, which fits
    for (uint64_t k = 0; k < kChunk; ++k)
      chunk_bad = static_cast<Bits>(chunk_bad + ((local[k] & mask) == mask));
    bad += chunk_bad;
    std::memcpy(static_cast<std::byte*>(dst) + i * sizeof(Bits), local, n * sizeof(Bits));
  }
  return bad;
}

}  // namespace

// The conversions count NaN and infinity (an all-ones exponent) among the values they write, in
// the same loop, so that a checkpoint's bad weights are found without another pass over it.
uint64_t to_f32(const TensorView& t, float* dst, uint64_t first, uint64_t count) {
  check_range(t, first, count);
  if (count == 0) return 0;  // an empty tensor's bytes may be null, which memcpy must not get
  const std::byte* src = t.bytes.data() + first * dtype_size(t.dtype);
  uint64_t bad = 0;
  switch (t.dtype) {
    case TensorDType::F32:
      return copy_counting<uint32_t>(dst, src, count, 0x7f800000u);
    case TensorDType::F16:
      for (uint64_t i = 0; i < count; ++i) {
        const uint16_t h = load16(src + 2 * i);
        bad += (h & 0x7c00u) == 0x7c00u;
        dst[i] = f16_to_f32(h);
      }
      return bad;
    case TensorDType::BF16:
      for (uint64_t i = 0; i < count; ++i) {
        const uint16_t h = load16(src + 2 * i);
        bad += (h & 0x7f80u) == 0x7f80u;
        dst[i] = bf16_to_f32(h);
      }
      return bad;
  }
  return bad;
}

uint64_t to_f16(const TensorView& t, uint16_t* dst, uint64_t first, uint64_t count) {
  check_range(t, first, count);
  if (count == 0) return 0;  // an empty tensor's bytes may be null, which memcpy must not get
  const std::byte* src = t.bytes.data() + first * dtype_size(t.dtype);
  uint64_t bad = 0;
  switch (t.dtype) {
    case TensorDType::F16:
      return copy_counting<uint16_t>(dst, src, count, 0x7c00u);
    case TensorDType::F32:
      for (uint64_t i = 0; i < count; ++i) {
        float v;
        std::memcpy(&v, src + 4 * i, 4);
        const uint16_t h = f32_to_f16(v);  // never read back dst: it may be uncached memory
        bad += (h & 0x7c00u) == 0x7c00u;     // also values past fp16's range, now infinite
        dst[i] = h;
      }
      return bad;
    case TensorDType::BF16:  // bf16 -> fp32 is exact, so this rounds once
      for (uint64_t i = 0; i < count; ++i) {
        const uint16_t h = f32_to_f16(bf16_to_f32(load16(src + 2 * i)));
        bad += (h & 0x7c00u) == 0x7c00u;
        dst[i] = h;
      }
      return bad;
  }
  return bad;
}

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(t.elements());
  to_f32(t, out.data(), 0, out.size());
  return out;
}

}  // namespace model
