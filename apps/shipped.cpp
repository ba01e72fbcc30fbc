#include "apps/shipped.h"

#include <system_error>

#if defined(__APPLE__)
#include <mach-o/dyld.h>

#include <cstdint>
#endif

namespace app {
namespace {

std::filesystem::path executable() {
  std::error_code ec;
#if defined(__APPLE__)
  uint32_t size = 0;
  _NSGetExecutablePath(nullptr, &size);
  std::string buf(size, '\0');
  if (_NSGetExecutablePath(buf.data(), &size) != 0) return {};
  std::filesystem::path p = std::filesystem::canonical(buf.c_str(), ec);
#else
  std::filesystem::path p = std::filesystem::canonical("/proc/self/exe", ec);
#endif
  return ec ? std::filesystem::path{} : p;
}

}  // namespace

std::vector<std::filesystem::path> shipped_roots() {
  const std::filesystem::path exe = executable();
  if (exe.empty()) return {};
  const std::filesystem::path bin = exe.parent_path();
  return {(bin / GPT2VK_BIN_TO_SHARE).lexically_normal(), bin, bin.parent_path()};
}

std::optional<std::filesystem::path> find_shipped(const std::filesystem::path& relative) {
  std::error_code ec;
  for (const std::filesystem::path& root : shipped_roots())
    if (std::filesystem::exists(root / relative, ec)) return root / relative;
  return std::nullopt;
}

std::string shipped_missing(const std::filesystem::path& relative) {
  std::string where;
  for (const std::filesystem::path& root : shipped_roots())
    where += (where.empty() ? "" : ", ") + root.string();
  if (where.empty())
    return relative.string() + " cannot be looked for: the binary's own path is unknown";
  return relative.string() + " is in none of: " + where;
}

}  // namespace app
