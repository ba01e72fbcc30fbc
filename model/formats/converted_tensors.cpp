// Another library's names and layout -> the canonical ones (converted_tensors.h).
#include "model/formats/converted_tensors.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "model/formats/dtype.h"
#include "model/formats/json_util.h"

namespace model {

std::vector<uint64_t> part_shape(const ExpectedTensor& e, const TensorSource& src) {
  if (!src.stored_shape.empty()) return src.stored_shape;
  const auto parts = static_cast<uint64_t>(src.parts.size());
  if (src.linear) return {e.shape[1] / parts, e.shape[0]};
  if (parts == 1) return e.shape;
  return {e.shape[0] / parts};
}

std::vector<std::vector<float>> file_parts(const ExpectedTensor& e, const TensorSource& src,
                                           const std::vector<float>& values) {
  if (src.fp32)
    throw std::invalid_argument("file_parts: " + e.name + " is computed from " + src.parts[0] +
                                ", which has no inverse here");
  if (values.size() != e.elements())
    throw std::invalid_argument("file_parts: " + e.name + " has " + std::to_string(values.size()) +
                                " values, not " + std::to_string(e.elements()));
  const size_t parts = src.parts.size();
  std::vector<std::vector<float>> out(parts);
  if (!src.linear) {  // one after another
    const size_t n = values.size() / parts;
    for (size_t p = 0; p < parts; p++)
      out[p].assign(values.begin() + static_cast<ptrdiff_t>(p * n),
                    values.begin() + static_cast<ptrdiff_t>((p + 1) * n));
    return out;
  }
  // part_p[j, k] = canonical[k, p * n + j], canonical [K, N], n = N / parts.
  const size_t K = e.shape[0], N = e.shape[1], n = N / parts;
  for (size_t p = 0; p < parts; p++) {
    out[p].resize(n * K);
    for (size_t j = 0; j < n; j++)
      for (size_t k = 0; k < K; k++) out[p][j * K + k] = values[k * N + p * n + j];
  }
  return out;
}

std::set<std::string, std::less<>> convert_tensors(const PresentTensors& present,
                                                   const OtherTensors& other,
                                                   const std::vector<ExpectedTensor>& expected,
                                                   const std::map<std::string, TensorSource>& from,
                                                   ConvertedTensors& out) {
  std::set<std::string, std::less<>> used;
  for (const ExpectedTensor& e : expected) {
    const TensorSource& src = from.at(e.name);
    const auto parts = static_cast<uint64_t>(src.parts.size());
    const std::vector<uint64_t> shape = part_shape(e, src);
    std::vector<const TensorView*> found;
    for (const std::string& name : src.parts) {
      const auto it = present.find(name);
      if (it == present.end()) {
        const auto o = other.find(name);
        out.problems.push_back(o == other.end()
                                   ? "missing " + name + " " + json_util::shape_str(shape)
                                   : name + ": unsupported dtype " + o->second +
                                         " (supported: F32, F16, BF16)");
        continue;
      }
      used.insert(name);
      if (it->second->shape != shape) {
        out.problems.push_back(name + ": shape " + json_util::shape_str(it->second->shape) +
                               " but the config implies " + json_util::shape_str(shape));
        continue;
      }
      if (!found.empty() && it->second->dtype != found[0]->dtype) {
        out.problems.push_back(name + ": dtype " + dtype_name(it->second->dtype) + " but " +
                               src.parts[0] + " is " + dtype_name(found[0]->dtype));
        continue;
      }
      found.push_back(it->second);
    }
    if (found.size() != src.parts.size()) continue;
    if (src.fp32) {  // one part, computed in fp32
      const std::vector<float> v = src.fp32(to_f32(*found[0]));
      if (v.size() != e.elements())
        throw std::logic_error("convert_tensors: " + e.name + " computed as " +
                               std::to_string(v.size()) + " values, not " +
                               std::to_string(e.elements()));
      std::vector<std::byte>& bytes = out.storage.emplace_back(v.size() * sizeof(float));
      std::memcpy(bytes.data(), v.data(), bytes.size());
      out.views.emplace(e.name, TensorView{e.name, TensorDType::F32, e.shape, bytes});
      continue;
    }
    if (found.size() == 1 && !src.linear) {  // as stored (a unit dimension dropped at most)
      TensorView v = *found[0];
      v.name = e.name;
      v.shape = e.shape;
      out.views.emplace(e.name, v);
      continue;
    }
    // Transposed and side by side: out[k, p * n + j] = part_p[j, k] (a linear layer), or the
    // parts one after another (biases).
    const size_t es = dtype_size(found[0]->dtype);
    std::vector<std::byte>& bytes = out.storage.emplace_back(e.elements() * es);
    if (!src.linear) {
      size_t at = 0;
      for (const TensorView* t : found) {
        std::memcpy(bytes.data() + at, t->bytes.data(), t->bytes.size());
        at += t->bytes.size();
      }
    } else {
      const uint64_t K = e.shape[0], N = e.shape[1], n = N / parts;
      for (uint64_t p = 0; p < parts; p++)
        for (uint64_t j = 0; j < n; j++)
          for (uint64_t k = 0; k < K; k++)
            std::memcpy(bytes.data() + (k * N + p * n + j) * es,
                        found[p]->bytes.data() + (j * K + k) * es, es);
    }
    out.views.emplace(e.name, TensorView{e.name, found[0]->dtype, e.shape, bytes});
  }
  return used;
}

}  // namespace model
