// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
// little-endian tensor data, offsets relative to the end of the header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
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

// One safetensors file, memory-mapped read-only, validated entirely on open: header length
// within the file and below a sane bound, JSON well-formed, every entry with a known dtype, a
// shape and data_offsets inside the data area, size == product(shape) * dtype size, no two
// tensors overlapping. Errors throw std::runtime_error "<file>: <tensor>: <problem>".
class SafeTensors {
 public:
  static std::unique_ptr<SafeTensors> open(const std::filesystem::path& file);
  // The same checks on bytes already in memory (the fuzz target): the views point into `bytes`,
  // which must outlive the result; `name` stands for the file in messages.
  static std::unique_ptr<SafeTensors> parse(std::span<const std::byte> bytes,
                                            const std::filesystem::path& name);
  ~SafeTensors();
  SafeTensors(const SafeTensors&) = delete;
  SafeTensors& operator=(const SafeTensors&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensors of a dtype the format defines but this engine does not read (BOOL, I64, F64, ...):
  // checked like the others (offsets, size, overlap) but not in tensors(); a model that needs
  // one fails in Checkpoint::load, naming it. A dtype the format does not define fails open().
  struct Unsupported {
    std::string name, dtype;
    std::vector<uint64_t> shape;
  };
  const std::vector<Unsupported>& unsupported() const { return unsupported_; }
  uint64_t file_bytes() const { return size_; }

 private:
  SafeTensors() = default;
  void map_file();      // sets base_ and size_
  void parse_header();  // fills tensors_, index_ and metadata_
  std::filesystem::path path_;
  const std::byte* base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;  // base_ is an mmap; else it points into owned_ or the caller's bytes
  std::vector<std::byte> owned_;     // the file's bytes where mmap is not available
  std::vector<TensorView> tensors_;  // in file order (ascending data offsets)
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
  std::vector<Unsupported> unsupported_;
};

// Writes a file in the format, streaming: the header (padded with spaces to a multiple of 8
// bytes, as the reference writer does) goes out on construction, then the tensors' data in the
// given order through write(), so a model never has to be held in memory whole.
struct TensorSpec {
  std::string name;
  TensorDType dtype = TensorDType::F32;
  std::vector<uint64_t> shape;
};
class SafeTensorsWriter {
 public:
  SafeTensorsWriter(const std::filesystem::path& file, std::vector<TensorSpec> tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafeTensorsWriter();
  SafeTensorsWriter(const SafeTensorsWriter&) = delete;
  SafeTensorsWriter& operator=(const SafeTensorsWriter&) = delete;

  void write(std::span<const std::byte> bytes);  // the next bytes of data, in tensor order
  void finish();  // checks that exactly every tensor's bytes came, then flushes and closes

 private:
  std::filesystem::path path_;
  std::FILE* out_ = nullptr;
  uint64_t data_bytes_ = 0;  // total the header promises
  uint64_t written_ = 0;
};

// For tests and tools: whole tensors in memory, written with SafeTensorsWriter.
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
