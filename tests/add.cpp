#include "tests/add.h"

#include "model/ops/gpu/common.h"
#include "shaders/add.h"

namespace test {

void gpu_add(const model::gpu::Ops& k, vk::Recorder& rec, const vk::BufferSpan& out, const vk::BufferSpan& a,
             const vk::BufferSpan& b, uint32_t n) {
  model::gpu::require_elements("add", "out", out, n);
  model::gpu::require_elements("add", "a", a, n);
  model::gpu::require_elements("add", "b", b, n);
  const vk::Pipeline& p =
      k.get(vk::Shader::add, {{model::gpu::default_workgroup(k.device().caps()), 1, 1}, {}});
  rec.dispatch(p, {out, a, b}, push::AddPush{n}, vk::groups_for(k.device(), p, n));
}

void cpu_add(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] = static_cast<float>(static_cast<double>(a[i]) + static_cast<double>(b[i]));
}

}  // namespace test
