// Every embedded SPIR-V module passes spirv-val and translates to Metal with spirv-cross, the
// translation MoltenVK performs on Apple devices.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace

TEST_CASE("every embedded module passes spirv-val and spirv-cross --msl") {
  if (!tool_found(SPIRV_VAL) || !tool_found(SPIRV_CROSS)) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") FAIL("spirv-val or spirv-cross not found (install spirv-tools, spirv-cross)");
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
    CHECK(run(dir / "tool.log", std::string(SPIRV_CROSS) + " --msl --msl-version 20100 " + file.string() +
              " --output " + (dir / (std::string(m.name) + ".metal")).string()) == 0);
  }
}
