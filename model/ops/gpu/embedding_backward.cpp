#include "model/ops/gpu/embedding_backward.h"

#include <algorithm>
#include <string>

#include "shaders/embedding.h"
#include "vk/check.h"

namespace model::gpu {

void embedding_backward(const Ops& ops, vk::Recorder& rec, const EmbeddingBackwardArgs& a) {
  const vk::BufferSpan &dwte = a.dwte, &dout = a.dout, &ids = a.ids;
  const vk::BufferSpan* dwpe = a.dwpe;
  const uint32_t n = a.n, T = a.T, C = a.C, V = a.V;
  if (C == 0 || T == 0 || V == 0 || n % T != 0)
    fail("embedding_backward", "n=" + std::to_string(n) + " tokens must be whole sequences of T=" +
                                   std::to_string(T) + ", with C=" + std::to_string(C) +
                                   " and V=" + std::to_string(V) + " positive");
  require_elements("embedding_backward", "dwte", dwte, uint64_t{V} * C);
  require_elements("embedding_backward", "dout", dout, uint64_t{n} * C);
  require_elements("embedding_backward", "ids", ids, n, sizeof(int32_t));
  if (dwpe) require_elements("embedding_backward", "dwpe", *dwpe, uint64_t{T} * C);
  if (n == 0) return;
  const vk::DeviceCaps& caps = ops.device().caps();
  const uint64_t align = binding_alignment(caps), range = caps.max_storage_buffer_range;
  const uint64_t row_bytes = uint64_t{C} * sizeof(float);
  if (uint64_t{n} * row_bytes > range)
    fail("embedding_backward", "dout's " + std::to_string(uint64_t{n} * row_bytes) +
                                   " bytes exceed what one binding may hold");
  const uint64_t rows = range > align + row_bytes ? (range - align) / row_bytes : 0;
  if (rows == 0) fail("embedding_backward", "one dwte row does not fit in one binding");
  const vk::Pipeline& p =
      ops.get(vk::Shader::embedding_backward, {{default_workgroup(caps), 1, 1}, {}});
  const vk::BufferSpan pos = dwpe ? dwpe->sub(0, uint64_t{T} * row_bytes) : dout.sub(0, 4);
  for (uint64_t v0 = 0; v0 < V; v0 += rows) {
    const uint64_t v1 = std::min<uint64_t>(V, v0 + rows);
    const Window w = window(dwte, v0 * C, (v1 - v0) * C, sizeof(float), align);
    const push::EmbeddingBackwardPush push{n,
                                           T,
                                           C,
                                           static_cast<uint32_t>(v0),
                                           static_cast<uint32_t>(v1),
                                           w.skip,
                                           dwpe && v0 == 0 ? 1u : 0u,
                                           a.scale};
    rec.dispatch(p,
                 {w.span, pos, dout.sub(0, uint64_t{n} * row_bytes), ids.sub(0, uint64_t{n} * 4)},
                 push, vk::groups_for(ops.device(), p, C));
  }
}

}  // namespace model::gpu
