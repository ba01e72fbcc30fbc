// libFuzzer target: the safetensors reader (model/safetensors.h) on arbitrary bytes, parsed in
// memory by SafeTensors::parse with the checks a mapped file gets, then every tensor converted
// as a model load converts it. A std::runtime_error naming the source is the one acceptable
// failure; any other exception, a crash or a sanitizer report is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "fuzz/check.h"
#include "model/safetensors.h"

namespace {

constexpr const char* kSource = "fuzz.safetensors";
// Enough elements to cover every conversion loop; a whole big tensor would only cost time.
constexpr uint64_t kMaxConverted = 1024;

// Converts the first and the last elements of t, so that both ends of its bytes are read.
void convert(const model::TensorView& t) {
  const uint64_t n = std::min(t.elements(), kMaxConverted);
  std::vector<float> f(n);
  std::vector<uint16_t> h(n);
  for (const uint64_t first : {uint64_t{0}, t.elements() - n}) {
    model::to_f32(t, f.data(), first, n);
    model::to_f16(t, h.data(), first, n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  std::unique_ptr<model::SafeTensors> st;
  try {
    st = model::SafeTensors::parse(bytes, kSource);
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e, kSource);
    return 0;
  }
  // What open() promises: each view inside the data, sized by its shape and dtype, findable by
  // name, in file order, and no two non-empty views overlapping.
  const std::byte* end = bytes.data() + bytes.size();
  const std::byte* reach = nullptr;
  for (const model::TensorView& t : st->tensors()) {
    FUZZ_CHECK(st->find(t.name) == &t);
    FUZZ_CHECK(t.bytes.size() == t.elements() * model::dtype_size(t.dtype));
    if (t.bytes.empty()) continue;
    FUZZ_CHECK(t.bytes.data() >= bytes.data() + 8 && t.bytes.data() + t.bytes.size() <= end);
    FUZZ_CHECK(!reach || t.bytes.data() >= reach);
    reach = std::max(reach ? reach : t.bytes.data(), t.bytes.data() + t.bytes.size());
    convert(t);
  }
  return 0;
}
