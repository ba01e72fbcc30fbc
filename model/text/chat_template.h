// A conversation as the one text a base model continues: gpt2vk's plain chat template, which
// `gpt2vk chat` and the server's /v1/chat/completions both render (docs/chat.md). A folder's
// own Jinja `chat_template` is not rendered: there is no Jinja for C++ in Debian 12, and GPT-2,
// the models this runs, has none. The template:
//
//   SYSTEM\n\n                 each system (or developer) message, where it stands
//   User: USER\n               each user message
//   Assistant: ASSISTANT\n     each assistant message
//   Assistant:                 the reply's turn, which the model continues
//
// The reply ends at the end of turn "\nUser:" (a stop string, not part of the reply), at the
// end of text, or at its token limit; the space the model writes after "Assistant:" is the
// template's, not the reply's.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace model {

enum class ChatRole { System, User, Assistant };

struct ChatMessage {
  ChatRole role = ChatRole::User;
  std::string content;
};

// Where a reply's turn ends: the stop string the template's next user turn begins with.
inline constexpr std::string_view kChatEndOfTurn = "\nUser:";

// The text the model continues for the next assistant reply: the messages, then "Assistant:".
std::string render_chat(std::span<const ChatMessage> messages);

// A reply as it streams: the first piece loses the one space the model puts after
// "Assistant:", so that a reply rendered back ("Assistant: " + reply) is the text it came from.
class ChatReply {
 public:
  std::string push(std::string piece);

 private:
  bool begun_ = false;  // a first non-empty piece went through
};

// The conversation cut to fit `budget` tokens once rendered: whole turns (a user message and
// the messages up to the next user message) go from the oldest, never a system message and
// never the last turn. `tokens` counts a rendered text's tokens.
struct FittedChat {
  std::vector<ChatMessage> messages;  // what is kept, in order
  size_t dropped_turns = 0;
  size_t tokens = 0;  // of messages rendered
  bool fits = false;  // false: even the last turn alone (with the system messages) is over
};
FittedChat fit_chat(std::span<const ChatMessage> messages, size_t budget,
                    const std::function<size_t(const std::string&)>& tokens);

// Whether a model folder carries a chat template of its own (tokenizer_config.json's
// "chat_template", or a chat_template.jinja file), which render_chat does not follow. An
// unreadable or malformed tokenizer_config.json counts as none: the tokenizer's loader is
// the one to report it.
bool folder_has_chat_template(const std::filesystem::path& dir);

}  // namespace model
