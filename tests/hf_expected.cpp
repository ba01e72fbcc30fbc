#include "tests/hf_expected.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tests/files.h"

namespace test {

std::vector<double> Array::slice(size_t first, size_t count) const {
  if (first + count > values.size()) throw std::out_of_range("Array::slice past the end");
  return std::vector<double>(values.data() + first, values.data() + first + count);
}

std::map<std::string, Array> read_expected(const std::filesystem::path& file) {
  const std::string bytes = read_file(file);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  const char* data = bytes.data() + 8 + n;
  std::map<std::string, Array> out;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    Array a;
    a.shape = t["shape"].get<std::vector<uint64_t>>();
    const auto begin = t["data_offsets"][0].get<uint64_t>(), end = t["data_offsets"][1].get<uint64_t>();
    const std::string dtype = t["dtype"];
    const size_t size = dtype == "F64" || dtype == "I64" ? 8 : 4;
    for (uint64_t at = begin; at + size <= end; at += size) {
      const char* p = data + at;
      double v = 0;
      if (dtype == "F64") {
        std::memcpy(&v, p, 8);
      } else if (dtype == "I64") {
        int64_t i = 0;
        std::memcpy(&i, p, 8);
        v = static_cast<double>(i);
      } else if (dtype == "F32") {
        float f = 0;
        std::memcpy(&f, p, 4);
        v = f;
      } else if (dtype == "I32") {
        int32_t i = 0;
        std::memcpy(&i, p, 4);
        v = i;
      } else {
        throw std::runtime_error(file.string() + ": " + name + ": dtype " + dtype + " not read");
      }
      a.values.push_back(v);
    }
    out.emplace(name, std::move(a));
  }
  return out;
}

std::filesystem::path hf(const char* name) {
  return source_dir() / "tests/data/hf" / name;
}

double worst_scaled(std::span<const float> got, std::span<const double> ref, size_t w) {
  double worst = 0;
  for (size_t r = 0; r * w < ref.size(); r++) {
    double scale = 1;
    for (size_t i = 0; i < w; i++) scale = std::max(scale, std::fabs(ref[r * w + i]));
    for (size_t i = 0; i < w; i++)
      worst = std::max(worst, std::fabs(double{got[r * w + i]} - ref[r * w + i]) / scale);
  }
  return worst;
}

}  // namespace test
