// `gpt2vk serve`'s /v1/chat/completions: OpenAI's chat messages rendered with the plain chat
// template (model/text/chat_template.h) into the CompletionRequest the engine runs as any
// completion, and its answer written as OpenAI's chat objects.
#pragma once
#include <cstdint>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/serve/engine.h"
#include "apps/serve/request.h"
#include "model/formats/config.h"
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"

namespace app {

// Parses and checks a chat body for a slot of `context` tokens: messages (role system, user,
// assistant or developer; content a string or an array of {"type": "text", "text"} parts),
// max_completion_tokens or max_tokens (default: what the context leaves), and the sampling
// fields completions take (read_sampling). The template's end of turn joins the stop strings.
// Throws ApiError (400) naming the field ("messages[2].role").
CompletionRequest parse_chat(const std::string& body, const model::Tokenizer& tokenizer,
                             const model::Config& config, uint32_t context);

// OpenAI's usage object of a request's last event.
nlohmann::json usage(const Event& done);

// The whole answer: a chat.completion object with the reply as the assistant's message.
nlohmann::json chat_response(const std::string& id, std::time_t created, const std::string& model,
                             const std::string& text, const Event& done);

// A streamed answer's server-sent events: first a chunk whose delta carries the role, then one
// per piece of content, then the finish_reason (with usage) and [DONE].
class ChatStream {
 public:
  ChatStream(std::string id, std::time_t created, std::string model)
      : id_(std::move(id)), created_(created), model_(std::move(model)) {}
  // The "data: ...\n\n" lines of one engine event.
  std::string events(const Event& e);

 private:
  nlohmann::json chunk(const nlohmann::json& delta, const nlohmann::json& finish) const;
  std::string id_;
  std::time_t created_;
  std::string model_;
  model::ChatReply reply_;  // the template's space before the reply dropped
  bool begun_ = false;      // the role's chunk went out
};

}  // namespace app
