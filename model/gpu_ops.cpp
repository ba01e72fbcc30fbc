#include "model/gpu_ops.h"

#include <algorithm>

#include "shaders/common/push.h"
#include "vk/check.h"

namespace gpu {
namespace {

void require_floats(const char* op, const char* what, const vkr::BufferSpan& s, uint64_t count) {
  if (s.size < count * sizeof(float))
    throw vkr::Error(std::string(op) + ": " + what + " holds " + std::to_string(s.size) +
                     " bytes, needs " + std::to_string(count * sizeof(float)));
}

}  // namespace

uint32_t elementwise_workgroup(const vkr::DeviceCaps& caps) {
  return std::min({256u, caps.max_workgroup_invocations, caps.max_workgroup_size[0]});
}

void add(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out, const vkr::BufferSpan& a,
         const vkr::BufferSpan& b, uint32_t n) {
  require_floats("add", "out", out, n);
  require_floats("add", "a", a, n);
  require_floats("add", "b", b, n);
  const vkr::Pipeline& p = k.get("add", {{elementwise_workgroup(k.device().caps()), 1, 1}, {}});
  rec.dispatch(p, {out, a, b}, push::AddPush{n}, vkr::groups_for(k.device(), p, n));
}

}  // namespace gpu
