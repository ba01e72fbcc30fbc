// Where the files shipped with gpt2vk are (the demo models of models/, GPT-2's tokenizer files of
// data/): found relative to the running binary, so that a build folder inside the source tree
// and an installed copy (cmake --install: <prefix>/share/gpt2vk) both find them, and no path of
// the machine that built it is kept in the binary.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace app {

// The folders searched, in order: the install's data folder (<bin>/../share/gpt2vk), the binary's
// own folder, and its parent (a build folder inside the source tree). Empty where the binary's
// path cannot be found.
std::vector<std::filesystem::path> shipped_roots();

// `relative` (e.g. "models/kjv") under the first root that has it; nullopt where none does.
std::optional<std::filesystem::path> find_shipped(const std::filesystem::path& relative);

// "models/kjv is in none of: A, B, C" for an error message.
std::string shipped_missing(const std::filesystem::path& relative);

}  // namespace app
