// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
// little-endian tensor data, offsets relative to the end of the header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
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
// starting at element `first` of t.
void to_f32(const TensorView& t, float* dst, uint64_t first, uint64_t count);
void to_f16(const TensorView& t, uint16_t* dst, uint64_t first, uint64_t count);
std::vector<float> to_f32(const TensorView& t);

// One safetensors file, memory-mapped read-only, validated entirely on open: header length
// within the file and below a sane bound, JSON well-formed, every entry with a known dtype, a
// shape and data_offsets inside the data area, size == product(shape) * dtype size, no two
// tensors overlapping. Errors throw std::runtime_error "<file>: <tensor>: <problem>".
class SafeTensors {
 public:
  static std::unique_ptr<SafeTensors> open(const std::filesystem::path& file);
  ~SafeTensors();
  SafeTensors(const SafeTensors&) = delete;
  SafeTensors& operator=(const SafeTensors&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_bytes() const { return size_; }

 private:
  SafeTensors() = default;
  std::filesystem::path path_;
  const std::byte* base_ = nullptr;
  uint64_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// For tests and tools: writes tensors in the format (data in the given order, 8-byte aligned
// header as the reference writer pads it).
struct TensorData {
  std::string name;
  TensorDType dtype = TensorDType::F32;
  std::vector<uint64_t> shape;
  std::vector<std::byte> bytes;
};
TensorData make_tensor(std::string name, TensorDType dtype, std::vector<uint64_t> shape,
                       std::span<const float> values);  // converts values to dtype
void write_safetensors(const std::filesystem::path& file, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace model
