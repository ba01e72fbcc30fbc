// What every GPU op wrapper shares. Each op lives in model/ops/gpu/<op>.{h,cpp} beside its CPU
// reference model/ops/cpu/<op>.{h,cpp}, its shader shaders/<op>.comp and its test
// tests/test_<op>.cpp, with the same argument order everywhere: outputs, inputs, weights, sizes.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/ops/gpu/ops.h"
#include "model/ops/types.h"
#include "vk/context.h"
#include "vk/memory.h"
#include "vk/pipeline.h"
#include "vk/recorder.h"
#include "vk/sizes.h"

namespace model::gpu {

// A weight tensor on the device: fp32, or fp16 stored as packed pairs (element i is half i % 2
// of 32-bit word i / 2, little-endian).
struct Weight {
  vk::BufferSpan span;
  DType dtype = DType::F32;
  WeightLayout layout = WeightLayout::KN;  // of a matrix; Interleaved as gpu::interleave() packs
};

// fp32 -> binary16 bits, round to nearest even (what the GPU reads back as cpu::round_to_half).
uint16_t to_half(float x);
// Packs n floats as fp16 pairs for a DType::F16 weight (2 bytes each, n rounded up to even).
std::vector<uint16_t> to_half(const float* x, size_t n);

// The workgroup size for element-wise and row-wise ops on this device.
uint32_t default_workgroup(const vk::DeviceCaps& caps);

// The workgroup size for a row-wise op with one workgroup per row of n elements: the default,
// halved (down to 32) while half of it still covers the row, so that most invocations of a
// narrow row have work.
uint32_t row_workgroup(const vk::DeviceCaps& caps, uint32_t n);

// Throws vk::Error unless the device has `bytes` of shared memory per workgroup: what a shader's
// shared arrays take, declared at fixed maxima (shaders/*.h) whatever its specialization.
void require_shared_memory(const vk::DeviceCaps& caps, const char* op, uint32_t bytes);

// What a binding's offset must be a multiple of: minStorageBufferOffsetAlignment, and at least
// a 32-bit word (shaders index 32-bit elements).
uint64_t binding_alignment(const vk::DeviceCaps& caps);
// The same for a binding that may be a storage texel buffer: binding_alignment() and
// minTexelBufferOffsetAlignment both.
uint64_t texel_binding_alignment(const vk::DeviceCaps& caps);
// Whether a texel kernel can bind these spans: those it reads as texels start on
// texel_binding_alignment(), those it writes as vec4s on 16 bytes.
bool texel_aligned(const vk::DeviceCaps& caps, std::initializer_list<const vk::BufferSpan*> read,
                   std::initializer_list<const vk::BufferSpan*> written);

// Whether the texel version of an elementwise op (activation, add, ...: the kernel policy's
// texel_elementwise) can take `floats` floats in one dispatch: the policy asks for it, the device
// has rgba32f storage texel buffers, floats % 4 == 0 and they fit one binding and one texel
// buffer, the spans read as texels start on the texel alignment and those written as vec4s on
// 16 bytes.
bool texel_elementwise(const Ops& ops, uint64_t floats,
                       std::initializer_list<const vk::BufferSpan*> read,
                       std::initializer_list<const vk::BufferSpan*> written);

// Elements [first, first + count) of `s` as a binding. Bindings must start at a multiple of
// `align` (binding_alignment) and element `first` need not, so the binding starts at the aligned
// offset at or below it and `skip` is how many elements precede element `first` in it. It ends
// at a whole 32-bit word (fp16 elements come in pairs), but never past the end of `s`. `s`
// itself must start aligned, as arena allocations do.
struct Window {
  vk::BufferSpan span;
  uint32_t skip = 0;
};
Window window(const vk::BufferSpan& s, uint64_t first, uint64_t count, size_t bytes_each,
              uint64_t align);

// A pass's position read when it runs, for the ops whose work depends on it (embedding, the KV
// store, attention): null, the position is recorded in the push constants; else a span of one
// uint32 the host writes before each submission, and the op records nothing else that depends
// on the position (its bindings span whole caches and tables), so that one recording of a
// decode step serves every later one (model/forward/gpu_model.cpp). The host still passes the
// true position, to check and to plan with. Returns the binding: the step, or `unused` (any
// span the op binds read-only anyway) when there is none.
vk::BufferSpan step_binding(const char* op, const vk::BufferSpan* step,
                            const vk::BufferSpan& unused);
// With the position read at run time, a cache is bound whole: the bytes of the whole rows of
// `row_bytes` that both caches hold, as far as one storage-buffer binding may reach; throws
// unless that is at least `rows` rows (the ones the op touches).
uint64_t whole_cache_bytes(const char* op, const vk::DeviceCaps& caps,
                           const vk::BufferSpan& k_cache, const vk::BufferSpan& v_cache,
                           uint64_t row_bytes, uint64_t rows);

// Throws vk::Error "<op>: <what>": every wrapper's argument errors.
[[noreturn]] void fail(const char* op, const std::string& what);

// Throws vk::Error unless `s` holds at least `count` elements of `bytes_each` bytes.
void require_elements(const char* op, const char* what, const vk::BufferSpan& s, uint64_t count,
                      size_t bytes_each = sizeof(float));

}  // namespace model::gpu
