// Tensor element types of the safetensors format and conversions between them: whole tensors
// to fp32 or fp16 (counting NaN and infinite values), and single values bit by bit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace model {

enum class TensorDType { F32, F16, BF16 };
const char* dtype_name(TensorDType t);  // "F32", "F16", "BF16" as in the format
size_t dtype_size(TensorDType t);

// A tensor inside a mapped file (or any byte range that outlives the view).
struct TensorView {
  std::string name;
  TensorDType dtype = TensorDType::F32;
  std::vector<uint64_t> shape;
  std::span<const std::byte> bytes;
  uint64_t elements() const;  // product of shape (1 for a scalar)
};

// Converts any dtype to fp32 / to fp16 bits (round to nearest even), for `count` elements
// starting at element `first` of t. Returns how many converted values are NaN or infinite
// (counted in the same pass, so a checkpoint's bad weights cost nothing to find).
uint64_t to_f32(const TensorView& t, float* dst, uint64_t first, uint64_t count);
uint64_t to_f16(const TensorView& t, uint16_t* dst, uint64_t first, uint64_t count);
std::vector<float> to_f32(const TensorView& t);

// One value at a time: IEEE binary16 and bfloat16 bits <-> fp32. Narrowing rounds to nearest
// even, overflows to infinity, keeps NaN a (quiet) NaN and produces subnormals where due.
float f16_to_f32(uint16_t bits);
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
uint16_t f32_to_bf16(float value);

}  // namespace model
