// The plain chat template (model/text/chat_template.h): what a conversation renders to, the
// reply's leading space, the oldest turns dropped to fit a budget, and a folder's own template
// noticed.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "model/text/chat_template.h"
#include "model/generation/stop_strings.h"
#include "tests/files.h"

namespace {

using model::ChatMessage;
using model::ChatRole;

const ChatMessage kSystem{ChatRole::System, "Be brief."};
ChatMessage user(const std::string& s) {
  return {ChatRole::User, s};
}
ChatMessage assistant(const std::string& s) {
  return {ChatRole::Assistant, s};
}

// One token a byte, as the demo model's tokenizer.
size_t bytes(const std::string& text) {
  return text.size();
}

}  // namespace

TEST_CASE("chat_template: a conversation renders as the documented plain text") {
  const std::vector<ChatMessage> one = {user("Hi")};
  CHECK(model::render_chat(one) == "User: Hi\nAssistant:");
  const std::vector<ChatMessage> talk = {kSystem, user("Hi"), assistant("Hello."),
                                         user("Who are you?\nSay it.")};
  CHECK(model::render_chat(talk) ==
        "Be brief.\n\nUser: Hi\nAssistant: Hello.\nUser: Who are you?\nSay it.\nAssistant:");
  // A system message stands where it was sent; no message at all is the reply's turn alone.
  const std::vector<ChatMessage> late = {user("a"), kSystem};
  CHECK(model::render_chat(late) == "User: a\nBe brief.\n\nAssistant:");
  CHECK(model::render_chat({}) == "Assistant:");
  // The reply's end of turn is where the next user turn would begin.
  CHECK(model::render_chat(talk).find(std::string(model::kChatEndOfTurn)) != std::string::npos);
}

TEST_CASE("chat_template: the reply loses the one space the template leaves it") {
  model::ChatReply r;
  CHECK(r.push("") == "");
  CHECK(r.push(" ") == "");         // the first piece: the space only
  CHECK(r.push(" And") == " And");  // later pieces keep theirs
  model::ChatReply two;
  CHECK(two.push("  two") == " two");  // only one
  model::ChatReply none;
  CHECK(none.push("x y") == "x y");
  // Rendered back, a reply is the text the model continued with.
  const std::vector<ChatMessage> back = {user("Hi"), assistant(model::ChatReply().push(" Hello."))};
  CHECK(model::render_chat(back) == "User: Hi\nAssistant: Hello.\nAssistant:");
}

TEST_CASE("chat_template: the oldest turns go first, never a system message or the last turn") {
  const std::vector<ChatMessage> talk = {kSystem,     user("one"),    assistant("1"),
                                         user("two"), assistant("2"), user("three")};
  const size_t all = model::render_chat(talk).size();
  // Room for everything: nothing dropped.
  model::FittedChat f = model::fit_chat(talk, all, bytes);
  CHECK(f.fits);
  CHECK(f.dropped_turns == 0);
  CHECK(f.tokens == all);
  CHECK(f.messages.size() == talk.size());
  // One byte short: the first turn (user "one" and its reply) goes.
  f = model::fit_chat(talk, all - 1, bytes);
  CHECK(f.fits);
  CHECK(f.dropped_turns == 1);
  const std::vector<ChatMessage> kept = {kSystem, user("two"), assistant("2"), user("three")};
  CHECK(model::render_chat(f.messages) == model::render_chat(kept));
  CHECK(f.tokens == model::render_chat(kept).size());
  // Just room for the last turn and the system text.
  const std::vector<ChatMessage> last = {kSystem, user("three")};
  f = model::fit_chat(talk, model::render_chat(last).size(), bytes);
  CHECK(f.fits);
  CHECK(f.dropped_turns == 2);
  CHECK(model::render_chat(f.messages) == model::render_chat(last));
  // Less: it does not fit, and says how long the last turn is.
  f = model::fit_chat(talk, model::render_chat(last).size() - 1, bytes);
  CHECK_FALSE(f.fits);
  CHECK(f.tokens == model::render_chat(last).size());
  // A system message between turns stays where it was.
  const std::vector<ChatMessage> mid = {user("one"), kSystem, assistant("1"), user("two")};
  f = model::fit_chat(mid, model::render_chat(mid).size() - 1, bytes);
  CHECK(f.fits);
  const std::vector<ChatMessage> mid_kept = {kSystem, user("two")};
  CHECK(model::render_chat(f.messages) == model::render_chat(mid_kept));
  // An assistant message before any user one is a turn of its own.
  const std::vector<ChatMessage> early = {assistant("Welcome."), user("hi")};
  f = model::fit_chat(early, model::render_chat(early).size() - 1, bytes);
  CHECK(f.fits);
  CHECK(f.dropped_turns == 1);
  CHECK(f.messages.size() == 1);
  // Nothing but a system text over the budget: nothing to drop.
  const std::vector<ChatMessage> only = {kSystem};
  CHECK_FALSE(model::fit_chat(only, 3, bytes).fits);
}

TEST_CASE("chat_template: the end of turn is held back until it cannot be one") {
  model::StopStrings end_of_turn({std::string(model::kChatEndOfTurn)});
  CHECK(end_of_turn.push(" Hello") == " Hello");
  CHECK(end_of_turn.push("\nUs") == "");  // may begin "\nUser:"
  CHECK_FALSE(end_of_turn.stopped());
  CHECK(end_of_turn.push(" and") == "\nUs and");
  CHECK(end_of_turn.push("\nUser: more") == "");
  CHECK(end_of_turn.stopped());
}

TEST_CASE("chat_template: a folder's own chat template is noticed") {
  test::TempDir dir;
  CHECK_FALSE(model::folder_has_chat_template(dir.path()));
  test::write_file(dir / "tokenizer_config.json", R"({"model_max_length": 1024})");
  CHECK_FALSE(model::folder_has_chat_template(dir.path()));
  test::write_file(dir / "tokenizer_config.json",
                   R"({"chat_template": "{% for m in messages %}"})");
  CHECK(model::folder_has_chat_template(dir.path()));
  test::write_file(dir / "tokenizer_config.json",
                   R"({"chat_template": [{"name": "default", "template": "x"}]})");
  CHECK(model::folder_has_chat_template(dir.path()));
  test::write_file(dir / "tokenizer_config.json", "{not json");
  CHECK_FALSE(model::folder_has_chat_template(dir.path()));  // the tokenizer's to report
  test::TempDir jinja;
  test::write_file(jinja / "chat_template.jinja", "{{ messages }}");
  CHECK(model::folder_has_chat_template(jinja.path()));
}
