// What the train command's tests train: a byte-level GPT-2 of width 32, 2 layers of 2 heads,
// context 16 (config.json, for --init) and ~3 KB of text (data.txt), its first 600 bytes as a
// held-out text (val.txt), in a folder of their own.
#pragma once
#include <filesystem>

#include "tests/files.h"

namespace test {

struct TrainFiles {
  TempDir dir;
  std::filesystem::path config = dir / "config.json", data = dir / "data.txt",
                        val = dir / "val.txt";
  TrainFiles();
};

}  // namespace test
