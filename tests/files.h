// Files for tests: a temporary folder removed afterwards, whole-file writes, the source tree.
#pragma once
#include <filesystem>
#include <string_view>

namespace test {

// A fresh folder under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

void write_file(const std::filesystem::path& file, std::string_view bytes);
std::string read_file(const std::filesystem::path& file);

// The repository root (tests read shipped data: data/, models/, tests/data/).
std::filesystem::path source_dir();

}  // namespace test
