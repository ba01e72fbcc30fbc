#include "vk/reflect.h"

#include <algorithm>
#include <unordered_map>

#include "vk/check.h"

namespace vk {
namespace {

// The SPIR-V opcodes, decorations and storage classes this reader understands.
enum : uint32_t {
  OpTypeInt = 21, OpTypeFloat = 22, OpTypeVector = 23, OpTypeImage = 25, OpTypeSampledImage = 27,
  OpTypeArray = 28, OpTypeRuntimeArray = 29, OpTypeStruct = 30, OpTypePointer = 32,
  OpConstant = 43, OpVariable = 59, OpDecorate = 71, OpMemberDecorate = 72,
};
enum : uint32_t {
  DecBlock = 2, DecBufferBlock = 3, DecArrayStride = 6, DecNonWritable = 24,
  DecNonReadable = 25, DecBinding = 33, DecDescriptorSet = 34, DecOffset = 35,
};
enum : uint32_t {
  ScUniformConstant = 0, ScUniform = 2, ScPushConstant = 9, ScStorageBuffer = 12,
};
constexpr uint32_t kDimBuffer = 5;
enum : uint32_t { ImageFormatRgba32f = 1, ImageFormatRgba32ui = 30 };

struct Id {
  uint32_t opcode = 0;
  std::vector<uint32_t> operands;  // words after the result id
  uint32_t binding = UINT32_MAX, set = 0, array_stride = 0;
  bool block = false, buffer_block = false, non_writable = false, non_readable = false;
  std::unordered_map<uint32_t, uint32_t> member_offset;
  std::unordered_map<uint32_t, bool> member_non_writable, member_non_readable;
};

class Reader {
 public:
  explicit Reader(std::span<const uint32_t> words) {
    if (words.size() < 5 || words[0] != 0x07230203) throw Error("not a SPIR-V module");
    bound_ = words[3];
    ids_.resize(bound_);
    for (size_t i = 5; i < words.size();) {
      uint32_t op = words[i] & 0xffff, count = words[i] >> 16;
      if (count == 0 || i + count > words.size()) throw Error("truncated SPIR-V instruction");
      parse(op, words.subspan(i + 1, count - 1));
      i += count;
    }
  }

  ShaderInterface interface() const {
    ShaderInterface out;
    for (const Id& var : ids_) {
      if (var.opcode != OpVariable) continue;
      uint32_t storage = var.operands.at(1);
      const Id& pointee = at(at(var.operands.at(0)).operands.at(1));
      if (storage == ScPushConstant) {
        out.push_constant_bytes = size_of(pointee);
        continue;
      }
      if (storage != ScUniform && storage != ScStorageBuffer && storage != ScUniformConstant)
        continue;
      if (var.set != 0) throw Error("shader uses descriptor set " + std::to_string(var.set) + "; only set 0 is supported");
      BindingInfo b;
      b.binding = var.binding;
      b.type = descriptor_type(storage, pointee);
      if (b.type == VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER) b.format = texel_format(pointee);
      b.writes = !var.non_writable && !all_members(pointee, &Id::member_non_writable);
      b.reads = !var.non_readable && !all_members(pointee, &Id::member_non_readable);
      out.bindings.push_back(b);
    }
    std::sort(out.bindings.begin(), out.bindings.end(),
              [](const BindingInfo& a, const BindingInfo& b) { return a.binding < b.binding; });
    for (size_t i = 0; i < out.bindings.size(); i++)
      if (out.bindings[i].binding != i) throw Error("shader bindings must be numbered 0, 1, 2, ... without gaps");
    return out;
  }

 private:
  const Id& at(uint32_t id) const {
    if (id >= bound_) throw Error("SPIR-V id out of range");
    return ids_[id];
  }

  void parse(uint32_t op, std::span<const uint32_t> w) {
    switch (op) {
      case OpDecorate: {
        Id& t = ids_.at(w[0]);
        uint32_t extra = w.size() > 2 ? w[2] : 0;
        switch (w[1]) {
          case DecBinding: t.binding = extra; break;
          case DecDescriptorSet: t.set = extra; break;
          case DecBlock: t.block = true; break;
          case DecBufferBlock: t.buffer_block = true; break;
          case DecArrayStride: t.array_stride = extra; break;
          case DecNonWritable: t.non_writable = true; break;
          case DecNonReadable: t.non_readable = true; break;
        }
        return;
      }
      case OpMemberDecorate: {
        Id& t = ids_.at(w[0]);
        if (w[2] == DecOffset) t.member_offset[w[1]] = w[3];
        if (w[2] == DecNonWritable) t.member_non_writable[w[1]] = true;
        if (w[2] == DecNonReadable) t.member_non_readable[w[1]] = true;
        return;
      }
      case OpTypeInt: case OpTypeFloat: case OpTypeVector: case OpTypeImage:
      case OpTypeSampledImage: case OpTypeArray: case OpTypeRuntimeArray: case OpTypeStruct:
      case OpTypePointer: {
        Id& t = ids_.at(w[0]);
        t.opcode = op;
        t.operands.assign(w.begin() + 1, w.end());
        return;
      }
      case OpConstant: case OpVariable: {  // [result type, result id, ...]
        Id& t = ids_.at(w[1]);
        t.opcode = op;
        t.operands.assign(w.begin(), w.end());
        t.operands.erase(t.operands.begin() + 1);  // keep result type first
        return;
      }
    }
  }

  bool all_members(const Id& s, std::unordered_map<uint32_t, bool> Id::*flags) const {
    if (s.opcode != OpTypeStruct || s.operands.empty()) return false;
    for (uint32_t m = 0; m < s.operands.size(); m++)
      if (!(s.*flags).count(m)) return false;
    return true;
  }

  VkDescriptorType descriptor_type(uint32_t storage, const Id& type) const {
    if (storage == ScStorageBuffer || (storage == ScUniform && type.buffer_block))
      return VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    if (storage == ScUniform) return VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER;
    const Id& image = type.opcode == OpTypeSampledImage ? at(type.operands.at(0)) : type;
    if (image.opcode == OpTypeImage && image.operands.at(1) == kDimBuffer)
      return image.operands.at(5) == 2 ? VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER
                                       : VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
    throw Error("shader binds a resource other than buffers and texel buffers");
  }

  VkFormat texel_format(const Id& image) const {
    switch (image.operands.at(6)) {
      case ImageFormatRgba32f: return VK_FORMAT_R32G32B32A32_SFLOAT;
      case ImageFormatRgba32ui: return VK_FORMAT_R32G32B32A32_UINT;
      default: throw Error("storage texel buffer with a format other than rgba32f or rgba32ui");
    }
  }

  // Byte size of a type laid out with explicit offsets and strides (push-constant blocks).
  uint32_t size_of(const Id& t) const {
    switch (t.opcode) {
      case OpTypeInt: case OpTypeFloat: return t.operands.at(0) / 8;
      case OpTypeVector: return t.operands.at(1) * size_of(at(t.operands.at(0)));
      case OpTypeArray: {
        const Id& len = at(t.operands.at(1));
        return len.operands.at(1) * (t.array_stride ? t.array_stride : size_of(at(t.operands.at(0))));
      }
      case OpTypeStruct: {
        uint32_t end = 0;
        for (uint32_t m = 0; m < t.operands.size(); m++) {
          auto off = t.member_offset.find(m);
          uint32_t base = off == t.member_offset.end() ? 0 : off->second;
          end = std::max(end, base + size_of(at(t.operands[m])));
        }
        return end;
      }
      default: throw Error("unsupported type in a push-constant block");
    }
  }

  uint32_t bound_ = 0;
  std::vector<Id> ids_;
};

}  // namespace

ShaderInterface reflect(std::span<const uint32_t> spirv) { return Reader(spirv).interface(); }

}  // namespace vk
