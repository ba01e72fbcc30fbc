// Writing safetensors files, streamed: header first, then each tensor's bytes as they come.
#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>

#include "model/formats/json_util.h"
#include "model/formats/safetensors.h"
#include "model/formats/safetensors_writer.h"

namespace model {

namespace {

uint64_t checked_bytes(const std::string& name, TensorDType dtype,
                       const std::vector<uint64_t>& shape) {
  uint64_t n = dtype_size(dtype);
  for (uint64_t d : shape)
    if (json_util::mul_overflows(n, d, &n))
      throw std::invalid_argument(name + ": shape " + json_util::shape_str(shape) + " too large");
  return n;
}

}  // namespace

SafeTensorsWriter::SafeTensorsWriter(const std::filesystem::path& file,
                                     std::vector<TensorSpec> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(file) {
  // ordered_json keeps the header in data order, which is easier to read in a hex dump.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string, std::less<>> names;
  for (const TensorSpec& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second)
      throw std::invalid_argument(file.string() + ": " + t.name + ": duplicate or reserved name");
    const uint64_t bytes = checked_bytes(t.name, t.dtype, t.shape);
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {data_bytes_, data_bytes_ + bytes}}};
    data_bytes_ += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as the reference pads
  const uint64_t n = text.size();

  out_ = std::fopen(file.string().c_str(), "wb");
  if (!out_) throw std::runtime_error(file.string() + ": cannot create: " + std::strerror(errno));
  std::setvbuf(out_, nullptr, _IOFBF, 1 << 20);
  // The length is little-endian, as the host (dtype.cpp asserts it).
  if (std::fwrite(&n, 8, 1, out_) != 1 || std::fwrite(text.data(), 1, n, out_) != n) {
    const int err = errno;
    std::fclose(out_);  // no destructor runs for a constructor that throws
    out_ = nullptr;
    std::error_code ignored;
    std::filesystem::remove(file, ignored);
    throw std::runtime_error(file.string() + ": write failed: " + std::strerror(err));
  }
}

SafeTensorsWriter::~SafeTensorsWriter() {
  if (!out_) return;
  // Abandoned half way (an exception): leave no truncated file that looks like a model.
  std::fclose(out_);
  std::error_code ignored;
  std::filesystem::remove(path_, ignored);
}

void SafeTensorsWriter::write(std::span<const std::byte> bytes) {
  if (!out_) throw std::logic_error(path_.string() + ": write after finish");
  if (bytes.size() > data_bytes_ - written_)
    throw std::logic_error(path_.string() + ": more data than the header announced");
  if (bytes.empty()) return;  // an empty tensor's data() may be null, which fwrite must not get
  if (std::fwrite(bytes.data(), 1, bytes.size(), out_) != bytes.size())
    throw std::runtime_error(path_.string() + ": write failed: " + std::strerror(errno));
  written_ += bytes.size();
}

void SafeTensorsWriter::finish() {
  if (written_ != data_bytes_)
    throw std::logic_error(path_.string() + ": " + std::to_string(written_) +
                           " bytes of tensor data written, the header announced " +
                           std::to_string(data_bytes_));
  std::FILE* f = out_;
  out_ = nullptr;
  if (std::fclose(f) != 0) {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
    throw std::runtime_error(path_.string() + ": write failed: " + std::strerror(errno));
  }
}

TensorData make_tensor(std::string name, TensorDType dtype, std::vector<uint64_t> shape,
                       std::span<const float> values) {
  TensorData t{std::move(name), dtype, std::move(shape), {}};
  const uint64_t bytes = checked_bytes(t.name, dtype, t.shape);
  if (bytes / dtype_size(dtype) != values.size())
    throw std::invalid_argument(t.name + ": " + std::to_string(values.size()) +
                                " values for shape " + json_util::shape_str(t.shape));
  t.bytes.resize(bytes);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == TensorDType::F32) {
      std::memcpy(t.bytes.data() + 4 * i, &values[i], 4);
      continue;
    }
    const uint16_t h = dtype == TensorDType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
    std::memcpy(t.bytes.data() + 2 * i, &h, 2);
  }
  return t;
}

void write_safetensors(const std::filesystem::path& file, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const TensorData& t : tensors) {
    if (checked_bytes(t.name, t.dtype, t.shape) != t.bytes.size())
      throw std::invalid_argument(t.name + ": " + std::to_string(t.bytes.size()) +
                                  " bytes for shape " + json_util::shape_str(t.shape));
    specs.push_back({t.name, t.dtype, t.shape});
  }
  SafeTensorsWriter writer(file, std::move(specs), metadata);
  for (const TensorData& t : tensors) writer.write(t.bytes);
  writer.finish();
}

}  // namespace model
