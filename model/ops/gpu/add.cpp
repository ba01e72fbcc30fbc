#include "model/ops/gpu/add.h"

#include <algorithm>
#include <vector>

#include "shaders/add.h"
#include "shaders/fill.h"
#include "vk/check.h"

namespace model::gpu {
namespace {

// Elements of one binding: maxStorageBufferRange in whole aligned blocks, so every chunk's
// bindings start aligned too.
uint64_t chunk_floats(const vk::DeviceCaps& caps) {
  const uint64_t block = binding_alignment(caps);
  return caps.max_storage_buffer_range / block * block / sizeof(float);
}

}  // namespace

void add(const Ops& ops, vk::Recorder& rec, const AddArgs& args) {
  const vk::BufferSpan &out = args.out, &a = args.a, &b = args.b;
  const uint64_t n = args.n;
  require_elements("add", "out", out, n);
  require_elements("add", "a", a, n);
  require_elements("add", "b", b, n);
  const vk::DeviceCaps& caps = ops.device().caps();
  if (n > 0 && texel_elementwise(ops, n, {&a, &b}, {&out})) {
    // The texel kernel: four elements per invocation, in one dispatch.
    const vk::Pipeline& p = ops.get(vk::Shader::add_texel, {{default_workgroup(caps), 1, 1}, {}});
    const uint64_t bytes = n * 4;
    rec.dispatch(p, {out.sub(0, bytes), a.sub(0, bytes), b.sub(0, bytes)},
                 push::AddPush{static_cast<uint32_t>(n)}, vk::groups_for(ops.device(), p, n / 4));
    return;
  }
  const vk::Pipeline& p = ops.get(vk::Shader::add, {{default_workgroup(caps), 1, 1}, {}});
  const uint64_t chunk = chunk_floats(caps);
  for (uint64_t i = 0; i < n; i += chunk) {
    const uint64_t m = std::min(chunk, n - i), off = i * 4, bytes = m * 4;
    rec.dispatch(p, {out.sub(off, bytes), a.sub(off, bytes), b.sub(off, bytes)},
                 push::AddPush{static_cast<uint32_t>(m)}, vk::groups_for(ops.device(), p, m));
  }
}

void fill(const Ops& ops, vk::Recorder& rec, const FillArgs& a) {
  const vk::BufferSpan& out = a.out;
  const uint64_t n = a.n;
  const float value = a.value;
  require_elements("fill", "out", out, n);
  const vk::DeviceCaps& caps = ops.device().caps();
  const vk::Pipeline& p = ops.get(vk::Shader::fill, {{default_workgroup(caps), 1, 1}, {}});
  const uint64_t chunk = chunk_floats(caps);
  for (uint64_t i = 0; i < n; i += chunk) {
    const uint64_t m = std::min(chunk, n - i);
    rec.dispatch(p, {out.sub(i * 4, m * 4)}, push::FillPush{static_cast<uint32_t>(m), value},
                 vk::groups_for(ops.device(), p, m));
  }
}

}  // namespace model::gpu
