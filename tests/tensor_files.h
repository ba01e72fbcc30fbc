// Helpers for the safetensors / checkpoint tests: reference half-precision roundings written
// independently of model/dtype.cpp (searching the representable values, not bit tricks), and
// hand-made safetensors bytes for malformed-file cases.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace test {

double f16_value(uint16_t bits);  // IEEE binary16 by its definition: (-1)^s 2^(e-15) 1.m
uint16_t nearest_f16(float x);    // correctly rounded (nearest, ties to even), inf past 65520
uint16_t nearest_bf16(float x);   // correctly rounded bfloat16

// An 8-byte little-endian length, then `header`, then `data`.
std::string safetensors_bytes(std::string_view header, std::string_view data);
std::string le64(uint64_t n);

}  // namespace test
