// libFuzzer target: the safetensors reader (model/formats/safetensors.h) on arbitrary bytes, parsed in
// memory by SafeTensors::parse with the checks a mapped file gets, then every tensor converted
// as a model load converts it. A std::runtime_error naming the source is the one acceptable
// failure; any other exception, a crash or a sanitizer report is a finding.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "fuzz/check.h"
#include "model/formats/safetensors.h"

namespace {

constexpr const char* kSource = "fuzz.safetensors";

// Converts all of t, then its second half (an offset start), each to fp32 and to fp16. A tensor
// lies inside the input, so this costs no more than reading the input. The conversions count
// the NaN and infinite values they write (the load's check for bad weights): recount them from
// what was written.
void convert(const model::TensorView& t) {
  const uint64_t all = t.elements();
  std::vector<float> f(all);
  std::vector<uint16_t> h(all);
  for (const uint64_t first : {uint64_t{0}, all / 2}) {
    const uint64_t n = all - first;
    const uint64_t bad_f32 = model::to_f32(t, f.data(), first, n);
    FUZZ_CHECK(bad_f32 == static_cast<uint64_t>(
                              std::count_if(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n),
                                            [](float v) { return !std::isfinite(v); })));
    const uint64_t bad_f16 = model::to_f16(t, h.data(), first, n);
    FUZZ_CHECK(bad_f16 == static_cast<uint64_t>(
                              std::count_if(h.begin(), h.begin() + static_cast<std::ptrdiff_t>(n),
                                            [](uint16_t v) { return (v & 0x7c00u) == 0x7c00u; })));
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
