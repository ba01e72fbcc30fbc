#include "model/gpu/common.h"

#include <algorithm>

#include "vk/check.h"

namespace gpu {

size_t dtype_bytes(DType t) { return t == DType::F16 ? 2 : 4; }

uint32_t default_workgroup(const vkr::DeviceCaps& caps) {
  return std::min({256u, caps.max_workgroup_invocations, caps.max_workgroup_size[0]});
}

void require_elements(const char* op, const char* what, const vkr::BufferSpan& s, uint64_t count,
                      size_t bytes_each) {
  if (s.size < count * bytes_each)
    throw vkr::Error(std::string(op) + ": " + what + " holds " + std::to_string(s.size) +
                     " bytes, needs " + std::to_string(count * bytes_each));
}

}  // namespace gpu
