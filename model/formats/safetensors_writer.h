// Writing the safetensors format (model/formats/safetensors.h reads it).
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "model/formats/dtype.h"

namespace model {

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
