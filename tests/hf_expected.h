// The outputs Hugging Face's libraries saved beside a fixture (tests/data/hf/*/expected.safetensors):
// inputs as I64 and outputs as F64 and F32, which the engine's own reader does not take (it reads
// weights only), read here as doubles.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace test {

struct Array {
  std::vector<uint64_t> shape;
  std::vector<double> values;  // row-major
  // Row r of the array seen as [shape[0] * ... * shape[n-2], shape[n-1]] (1-D: the whole).
  std::vector<double> row(size_t r) const { return slice(r * width(), width()); }
  // `count` values from `first`.
  std::vector<double> slice(size_t first, size_t count) const;
  size_t width() const { return shape.empty() ? 1 : shape.back(); }
};

// Every tensor of the file, by name; F64, F32, I64 and I32 are read, any other dtype throws.
std::map<std::string, Array> read_expected(const std::filesystem::path& file);

// tests/data/hf/<name>: a folder the libraries saved.
std::filesystem::path hf(const char* name);

// The largest |got - ref| over rows of width w, each divided by its row's scale (its largest
// |ref|, at least 1): the fixtures' tolerance is stated in it.
double worst_scaled(std::span<const float> got, std::span<const double> ref, size_t w);

}  // namespace test
