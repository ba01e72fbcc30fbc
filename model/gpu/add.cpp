#include "model/gpu/add.h"

#include "shaders/add.h"

namespace gpu {

void add(vkr::Kernels& k, vkr::Recorder& rec, const vkr::BufferSpan& out, const vkr::BufferSpan& a,
         const vkr::BufferSpan& b, uint32_t n) {
  require_elements("add", "out", out, n);
  require_elements("add", "a", a, n);
  require_elements("add", "b", b, n);
  const vkr::Pipeline& p = k.get("add", {{default_workgroup(k.device().caps()), 1, 1}, {}});
  rec.dispatch(p, {out, a, b}, push::AddPush{n}, vkr::groups_for(k.device(), p, n));
}

}  // namespace gpu
