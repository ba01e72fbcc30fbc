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

#include "model/formats/dtype.h"

namespace model {

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

}  // namespace model
