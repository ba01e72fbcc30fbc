// Stop strings over a text that grows as it is generated: what can be shown now, and whether
// one has come. The server's engine and `gpt2vk chat` (its end of turn) both hold text back
// this way.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace model {

// How many bytes of `text` can go out now: up to the first stop string (found: *stopped), or
// all but its longest ending that begins some stop string (it may yet complete one). Every stop
// string is non-empty.
size_t sendable(const std::string& text, const std::vector<std::string>& stops, bool* stopped);

}  // namespace model
