#include "model/text/chat_template.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace model {

std::string render_chat(std::span<const ChatMessage> messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    switch (m.role) {
      case ChatRole::System:
        out += m.content + "\n\n";
        break;
      case ChatRole::User:
        out += "User: " + m.content + "\n";
        break;
      case ChatRole::Assistant:
        out += "Assistant: " + m.content + "\n";
        break;
    }
  }
  return out + "Assistant:";
}

std::string ChatReply::push(std::string piece) {
  if (!begun_ && !piece.empty()) {
    begun_ = true;
    if (piece[0] == ' ') piece.erase(0, 1);
  }
  return piece;
}

FittedChat fit_chat(std::span<const ChatMessage> messages, size_t budget,
                    const std::function<size_t(const std::string&)>& tokens) {
  FittedChat f;
  f.messages.assign(messages.begin(), messages.end());
  auto& m = f.messages;
  while (true) {
    f.tokens = tokens(render_chat(m));
    if (f.tokens <= budget) {
      f.fits = true;
      return f;
    }
    // The oldest turn: from the first message that is not a system one up to the next user
    // message. Without a next user message it is the last turn, which stays.
    const auto is_system = [](const ChatMessage& x) { return x.role == ChatRole::System; };
    const auto first = std::find_if_not(m.begin(), m.end(), is_system);
    if (first == m.end()) return f;
    const auto next_user = std::find_if(
        std::next(first), m.end(), [](const ChatMessage& x) { return x.role == ChatRole::User; });
    if (next_user == m.end()) return f;
    const auto kept_end =
        std::remove_if(first, next_user, [&](const ChatMessage& x) { return !is_system(x); });
    m.erase(kept_end, next_user);
    f.dropped_turns++;
  }
}

bool folder_has_chat_template(const std::filesystem::path& dir) {
  std::error_code error;
  if (std::filesystem::exists(dir / "chat_template.jinja", error)) return true;
  std::ifstream in(dir / "tokenizer_config.json", std::ios::binary);
  if (!in) return false;
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  const auto it = j.find("chat_template");
  // A string, or a list of named templates ({"name", "template"}).
  return it != j.end() &&
         ((it->is_string() && !it->get<std::string>().empty()) || (it->is_array() && !it->empty()));
}

}  // namespace model
