// Every embedded SPIR-V module passes spirv-val and translates to Metal with spirv-cross, the
// translation MoltenVK performs on Apple devices, and sizes its shared arrays with constants.
#include <doctest/doctest.h>

#include "tests/ci.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "vk/spirv_registry.h"

namespace {

bool tool_found(const char* path) { return path[0] != '\0' && std::filesystem::exists(path); }

int run(const std::filesystem::path& log_file, const std::string& command) {
  int status = std::system((command + " > " + log_file.string() + " 2>&1").c_str());
  if (status != 0) {
    std::ifstream log(log_file);
    std::string text((std::istreambuf_iterator<char>(log)), {});
    MESSAGE(command << "\n" << text);
  }
  return status;
}

// SPIR-V opcodes and the storage class the check below reads.
enum : uint32_t {
  kOpName = 5,
  kOpTypeArray = 28,
  kOpTypeRuntimeArray = 29,
  kOpTypeStruct = 30,
  kOpTypePointer = 32,
  kOpSpecConstantTrue = 48,
  kOpSpecConstantOp = 52,  // 48 .. 52 are all the OpSpecConstant* forms
  kOpVariable = 59,
  kWorkgroup = 4,
};

// The Workgroup (shared) variables of a module whose type holds, through pointers, arrays and
// structs, an array whose length is a specialization constant. spirv-cross turns such an array
// into a variable-length array in MSL, which Metal rejects, and MoltenVK before 1.3 sizes it at
// the constant's default (KhronosGroup/MoltenVK#2423). Each is named "name (%id): why".
std::vector<std::string> spec_sized_shared_arrays(std::span<const uint32_t> words) {
  if (words.size() < 5 || words[0] != 0x07230203u) return {"not a SPIR-V module"};
  std::map<uint32_t, std::vector<uint32_t>> types;  // result id -> the type instruction's words
  std::map<uint32_t, std::string> names;
  std::set<uint32_t> spec;                            // ids of specialization constants
  std::vector<std::pair<uint32_t, uint32_t>> shared;  // Workgroup variables: (id, pointer type)
  for (size_t i = 5; i < words.size();) {
    const uint32_t count = words[i] >> 16, op = words[i] & 0xffffu;
    if (count == 0 || i + count > words.size()) return {"a truncated instruction"};
    const uint32_t* w = &words[i];
    if (op == kOpName && count >= 3) {
      std::string name(reinterpret_cast<const char*>(&w[2]), (count - 2) * 4);
      names[w[1]] = name.substr(0, name.find('\0'));
    } else if ((op == kOpTypeArray || op == kOpTypeRuntimeArray || op == kOpTypeStruct ||
                op == kOpTypePointer) &&
               count >= 2)
      types[w[1]].assign(w, w + count);
    else if (op >= kOpSpecConstantTrue && op <= kOpSpecConstantOp && count >= 3)
      spec.insert(w[2]);
    else if (op == kOpVariable && count >= 4 && w[3] == kWorkgroup)
      shared.emplace_back(w[2], w[1]);
    i += count;
  }
  const auto name_of = [&](uint32_t id) {
    const auto it = names.find(id);
    return (it == names.end() || it->second.empty() ? "" : it->second + " ") + "(%" +
           std::to_string(id) + ")";
  };
  // Each variable's type, walked depth first down to its scalars, stops at the first array
  // sized by a specialization constant.
  std::vector<std::string> found;
  for (const auto& [var, pointer] : shared) {
    std::set<uint32_t> seen;
    std::vector<uint32_t> stack{pointer};
    std::string why;
    while (!stack.empty() && why.empty()) {
      const uint32_t id = stack.back();
      stack.pop_back();
      const auto it = types.find(id);
      if (it == types.end() || !seen.insert(id).second) continue;
      const std::vector<uint32_t>& w = it->second;
      const uint32_t op = w[0] & 0xffffu;
      if (op == kOpTypePointer && w.size() >= 4) stack.push_back(w[3]);
      if ((op == kOpTypeArray || op == kOpTypeRuntimeArray) && w.size() >= 3) stack.push_back(w[2]);
      if (op == kOpTypeStruct) stack.insert(stack.end(), w.begin() + 2, w.end());
      if (op == kOpTypeArray && w.size() >= 4 && spec.count(w[3]))
        why = "its array length is the specialization constant " + name_of(w[3]);
    }
    if (!why.empty()) found.push_back(name_of(var) + ": " + why);
  }
  return found;
}

}  // namespace

TEST_CASE("the shared-array check finds a length that is a specialization constant") {
  // shared float a[N] with layout(constant_id = 0) const uint N, as glslang emits it, and the
  // same array sized by a plain constant. Only the words the check reads; not a valid module.
  const auto module = [](uint32_t length_op) {
    // clang-format off
    return std::vector<uint32_t>{
        0x07230203u, 0x00010000u, 0, 20, 0,
        (4u << 16) | kOpName, 10, 0x00000061u, 0,  // %10 "a"
        (4u << 16) | 21, 1, 32, 0,  // %1 = OpTypeInt 32 0 (not read)
        (3u << 16) | 22, 2, 32,     // %2 = OpTypeFloat 32 (not read)
        (4u << 16) | length_op, 1, 3, 64,  // %3 = Op(Spec)Constant %1 64
        (4u << 16) | kOpTypeArray, 4, 2, 3,  // %4 = OpTypeArray %2 %3
        (3u << 16) | kOpTypeStruct, 5, 4,  // %5 = OpTypeStruct %4
        (4u << 16) | kOpTypePointer, 6, kWorkgroup, 5,  // %6 = OpTypePointer Workgroup %5
        (4u << 16) | kOpVariable, 6, 10, kWorkgroup};  // %10 = OpVariable %6 Workgroup
    // clang-format on
  };
  const uint32_t kOpConstant = 43, kOpSpecConstant = 50;
  const std::vector<std::string> spec = spec_sized_shared_arrays(module(kOpSpecConstant));
  REQUIRE(spec.size() == 1);
  CHECK(spec[0] == "a (%10): its array length is the specialization constant (%3)");
  CHECK(spec_sized_shared_arrays(module(kOpConstant)).empty());
}

// Metal needs shared arrays of a size fixed at compile time: every shader declares them at a
// maximum from its header (shaders/*.h), which the host checks its choices against.
TEST_CASE("no embedded module sizes a shared array with a specialization constant") {
  for (const vk::EmbeddedSpirv& m : vk::embedded_spirv())
    for (const std::string& v : spec_sized_shared_arrays({m.words, m.count}))
      FAIL_CHECK(std::string(m.name) << ": shared variable " << v);
}

TEST_CASE("every embedded module passes spirv-val and spirv-cross --msl") {
  if (!tool_found(SPIRV_VAL) || !tool_found(SPIRV_CROSS)) {
    if (test::in_ci()) FAIL("spirv-val or spirv-cross not found (install spirv-tools, spirv-cross)");
    MESSAGE("SKIPPED: spirv-val or spirv-cross not found");
    return;
  }
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "gpt2vk_spirv_test";
  std::filesystem::create_directories(dir);
  for (const vk::EmbeddedSpirv& m : vk::embedded_spirv()) {
    std::string name = m.name;
    CAPTURE(name);
    std::filesystem::path file = dir / (std::string(m.name) + ".spv");
    std::ofstream(file, std::ios::binary)
        .write(reinterpret_cast<const char*>(m.words), static_cast<std::streamsize>(m.count * 4));
    CHECK(run(dir / "tool.log", std::string(SPIRV_VAL) + " --target-env " SPIRV_TARGET_ENV " " + file.string()) == 0);
    // VK_NV_cooperative_matrix exists on NVIDIA's drivers only, never under MoltenVK, and
    // spirv-cross has no Metal form of it: the policy picks the module only where the device
    // lists the extension. Everything else must translate.
    if (name == "matmul_coop" || name == "matmul_coop_large") continue;
    CHECK(run(dir / "tool.log", std::string(SPIRV_CROSS) + " --msl --msl-version 20100 " + file.string() +
              " --output " + (dir / (std::string(m.name) + ".metal")).string()) == 0);
  }
}
