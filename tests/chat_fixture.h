// What the chat tests (tests/test_chat.cpp, tests/test_serve_chat.cpp) check replies against:
// the plain template written out again from docs/chat.md, `gpt2vk generate --temp 0` on the
// rendered text, and a demo model fine-tuned here to end its turns.
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace test {

// A finished turn: the user's line and the reply it got.
using Turn = std::pair<std::string, std::string>;

// docs/chat.md's template: the system text, the turns, then `next` and the reply's turn.
std::string render_chat(const std::string& system, const std::vector<Turn>& turns,
                        const std::string& next);

// What `gpt2vk generate --temp 0 -n N` continues `prompt` with (model "" = the demo model).
std::string generated(const std::string& model, const std::string& prompt, int n);

// The reply a continuation makes: cut at the end of turn "\nUser:", its one leading space
// dropped.
std::string reply_of(const std::string& continuation);

// Trains the demo model (models/kjv) for 30 steps on conversations whose every reply is
// "Peace be with thee.", in `dir`: a model that ends its turns with "\nUser:", the stop the
// shipped model never writes. Returns its folder. About 5 s on lavapipe. Sequential windows,
// the order the chat tests' expected replies were found with.
std::filesystem::path chat_model(const std::filesystem::path& dir);

}  // namespace test
