#include "model/ops/gpu/common.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/ops/gpu/choose.h"
#include "vk/check.h"

namespace model::gpu {

uint16_t to_half(float x) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  const uint32_t sign = (f >> 16) & 0x8000u, abs = f & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // nan
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // inf, or rounds past 65504
  if (abs < 0x38800000u) {  // subnormal half: multiples of 2^-24
    auto m = static_cast<uint32_t>(std::nearbyint(std::fabs(x) * 16777216.0f));
    return static_cast<uint16_t>(sign | m);  // m == 1024 is the smallest normal, correctly encoded
  }
  uint32_t rem = abs & 0x1fffu, keep = abs >> 13;
  if (rem > 0x1000u || (rem == 0x1000u && (keep & 1u))) keep++;
  return static_cast<uint16_t>(sign | (keep - ((127u - 15u) << 10)));
}

std::vector<uint16_t> to_half(const float* x, size_t n) {
  std::vector<uint16_t> out(n + (n & 1), 0);
  for (size_t i = 0; i < n; i++) out[i] = to_half(x[i]);
  return out;
}

uint32_t default_workgroup(const vk::DeviceCaps& caps) {
  return std::min({256u, caps.max_workgroup_invocations, caps.max_workgroup_size[0]});
}

uint32_t row_workgroup(const vk::DeviceCaps& caps, uint32_t n) {
  uint32_t wg = default_workgroup(caps);
  while (wg > 32 && wg / 2 >= n) wg /= 2;
  return wg;
}

void require_shared_memory(const vk::DeviceCaps& caps, const char* op, uint32_t bytes) {
  if (caps.max_shared_memory < bytes)
    fail(op, "needs " + std::to_string(bytes) + " bytes of shared memory; device '" + caps.name +
                 "' allows " + std::to_string(caps.max_shared_memory));
}

uint64_t binding_alignment(const vk::DeviceCaps& caps) {
  return std::max<uint64_t>(4, caps.storage_buffer_alignment);
}

uint64_t texel_binding_alignment(const vk::DeviceCaps& caps) {
  return std::max(binding_alignment(caps), caps.texel_buffer_alignment);
}

bool texel_elementwise(const Ops& ops, uint64_t floats,
                       std::initializer_list<const vk::BufferSpan*> read,
                       std::initializer_list<const vk::BufferSpan*> written) {
  const vk::DeviceCaps& caps = ops.caps();
  return elementwise_texel(ops.policy()) && caps.storage_texel_buffers && floats % 4 == 0 &&
         floats * 4 <= caps.max_storage_buffer_range &&
         floats / 4 <= caps.max_texel_buffer_elements && texel_aligned(caps, read, written);
}

bool texel_aligned(const vk::DeviceCaps& caps, std::initializer_list<const vk::BufferSpan*> read,
                   std::initializer_list<const vk::BufferSpan*> written) {
  const uint64_t align = texel_binding_alignment(caps);
  for (const vk::BufferSpan* s : read)
    if (s->offset % align != 0) return false;
  for (const vk::BufferSpan* s : written)
    if (s->offset % 16 != 0) return false;
  return true;
}

Window window(const vk::BufferSpan& s, uint64_t first, uint64_t count, size_t bytes_each,
              uint64_t align) {
  const uint64_t begin = first * bytes_each, lo = begin / align * align;
  const uint64_t end = std::min<uint64_t>((begin + count * bytes_each + 3) / 4 * 4, s.size);
  return {s.sub(lo, end - lo), static_cast<uint32_t>((begin - lo) / bytes_each)};
}

void require_elements(const char* op, const char* what, const vk::BufferSpan& s, uint64_t count,
                      size_t bytes_each) {
  if (s.size < count * bytes_each)
    throw vk::Error(std::string(op) + ": " + what + " holds " + std::to_string(s.size) +
                     " bytes, needs " + std::to_string(count * bytes_each));
}

void fail(const char* op, const std::string& what) {
  throw vk::Error(std::string(op) + ": " + what);
}

vk::BufferSpan step_binding(const char* op, const vk::BufferSpan* step,
                            const vk::BufferSpan& unused) {
  if (!step) return unused;
  require_elements(op, "step", *step, 1, sizeof(uint32_t));
  return step->sub(0, sizeof(uint32_t));
}

uint64_t whole_cache_bytes(const char* op, const vk::DeviceCaps& caps,
                           const vk::BufferSpan& k_cache, const vk::BufferSpan& v_cache,
                           uint64_t row_bytes, uint64_t rows) {
  const uint64_t bound =
      std::min({k_cache.size, v_cache.size, caps.max_storage_buffer_range}) / row_bytes;
  if (bound < rows)
    fail(op, std::to_string(rows) + " cache rows exceed what one binding of this device may " +
                 "hold (" + std::to_string(caps.max_storage_buffer_range) + " bytes)");
  return bound * row_bytes;
}

}  // namespace model::gpu
