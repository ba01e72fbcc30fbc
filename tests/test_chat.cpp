// gpt2vk chat from outside: user lines piped to stdin, each reply on stdout checked against
// `gpt2vk generate --temp 0` on the conversation rendered by the documented template; the
// end of turn, a line over the context, the oldest turns dropped, SIGINT and end of input.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/chat_fixture.h"
#include "tests/cli.h"
#include "tests/files.h"
#include "tests/process.h"

namespace {

// Lines into a FIFO; opening it waits for the reader.
class Writer {
 public:
  explicit Writer(const std::filesystem::path& fifo) : fd_(open(fifo.c_str(), O_WRONLY)) {
    REQUIRE(fd_ >= 0);
  }
  ~Writer() { close(fd_); }
  void line(const std::string& text) {
    const std::string l = text + "\n";
    REQUIRE(write(fd_, l.data(), l.size()) == ssize_t(l.size()));
  }

 private:
  int fd_;
};

// Waits (at most two minutes) for `ready`.
bool await(const std::function<bool()>& ready) {
  for (int i = 0; i < 2400; i++) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The demo model's context: every test here runs it (a byte-level model: a token a byte).
constexpr size_t kContext = 256;

// The replies `gpt2vk chat --temp 0 -n N` gives to `lines` with the demo model, computed
// without it: the conversation rendered, generate's continuation, cut, as docs/chat.md says;
// the oldest turns left out while the rendered text and N tokens pass the context. `dropped`
// gets the turns left out.
std::string expected_replies(const std::string& model, const std::string& system,
                             const std::vector<std::string>& lines, int n,
                             size_t* dropped = nullptr) {
  std::vector<test::Turn> turns;
  std::string out;
  for (const std::string& line : lines) {
    while (!turns.empty() && test::render_chat(system, turns, line).size() + size_t(n) > kContext) {
      turns.erase(turns.begin());
      if (dropped) ++*dropped;
    }
    const std::string reply =
        test::reply_of(test::generated(model, test::render_chat(system, turns, line), n));
    out += reply + "\n";
    turns.push_back({line, reply});
  }
  return out;
}

}  // namespace

TEST_CASE("chat: piped lines get what generate continues the rendered conversation with") {
  const test::CliResult r =
      test::gpt2vk({"chat", "--temp", "0", "-n", "16"}, {}, "In the beginning\nAnd God said\n");
  INFO(r.err);
  CHECK(r.exit_code == 0);  // the end of input
  CHECK(r.out == expected_replies("", "", {"In the beginning", "And God said"}, 16));
  CHECK(r.err.find("> ") == std::string::npos);  // no prompt: stdin is not a terminal
  CHECK(test::no_validation_messages(r));

  // No line at all: nothing out, exit 0.
  const test::CliResult none = test::gpt2vk({"chat"}, {}, "");
  CHECK(none.exit_code == 0);
  CHECK(none.out.empty());
}

TEST_CASE("chat: the end of turn ends a reply, and is not printed") {
  test::TempDir dir;
  const std::string model = test::chat_model(dir.path()).string();
  // The tuned model ends its first reply with the end of turn (else this test checks nothing).
  const std::string first = test::render_chat("", {}, "light");
  REQUIRE(test::generated(model, first, 40).find("\nUser:") != std::string::npos);
  const test::CliResult r =
      test::gpt2vk({"chat", "-m", model, "--temp", "0", "-n", "40"}, {}, "light\r\nwater\n");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == expected_replies(model, "", {"light", "water"}, 40));
  CHECK(r.out.find("User:") == std::string::npos);
}

TEST_CASE("chat: a line over the context is refused, the loop goes on, the oldest turns go") {
  const std::string system = "The words of the book.";
  // With -n 100 the conversation keeps 156 tokens: each line's turn with its reply of about
  // 100 bytes passes that, so the turn before goes each time (a conversation of up to 256 - 100
  // tokens would have kept it, and generate slid the window).
  const std::vector<std::string> lines = {"And the earth was", "And the Spirit of God",
                                          "And God saw the light"};
  // Over the context; then an empty line. (Appended rather than `string(300, 'a') + "\n\n"`,
  // which GCC 12 at -O1 warns of wrongly: its -Warray-bounds false positive on operator+.)
  std::string input(300, 'a');
  input += "\n\n";
  for (const std::string& line : lines) input += line + "\n";
  const test::CliResult r =
      test::gpt2vk({"chat", "--temp", "0", "-n", "100", "--system", system}, {}, input);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  const size_t over = test::render_chat(system, {}, std::string(300, 'a')).size();
  CHECK(r.err.find("that line is too long: the conversation's last turn takes " +
                   std::to_string(over) +
                   " tokens, and the model's context of 256 keeps 100 of "
                   "them for the reply (-n); not sent") != std::string::npos);
  size_t dropped = 0;
  CHECK(r.out == expected_replies("", system, lines, 100, &dropped));
  REQUIRE(dropped == 2);  // else the trimming went untested
  const size_t note = r.err.find("the oldest 1 turn left out");
  CHECK(note != std::string::npos);
  CHECK(r.err.find("the oldest 1 turn left out", note + 1) != std::string::npos);
  CHECK(test::no_validation_messages(r));
}

TEST_CASE("chat: Ctrl-C stops a reply and the conversation goes on; at the prompt it leaves") {
  // stdin is a FIFO the test writes to: it signals once the first reply shows, then sends a
  // second line and ends the input. The test hook slows each token (10 ms) so that the signal
  // surely lands mid-reply.
  test::TempDir dir;
  const test::Env slow = {{"GPT2VK_CHAT_TOKEN_DELAY_MS", "10"}};
  REQUIRE(mkfifo((dir / "in").c_str(), 0600) == 0);
  test::Background chat({"chat", "--temp", "0", "-n", "200"}, slow, (dir / "in").string());
  {
    Writer in(dir / "in");  // once chat opened its end
    in.line("In the beginning");
    REQUIRE(await([&] { return !chat.out().empty(); }));
    kill(chat.pid(), SIGINT);
    in.line("And God said");
  }  // the end of input
  CHECK(chat.wait(120) == 0);
  const std::string out = chat.out();
  INFO(chat.err());
  CHECK(chat.err().find("gpt2vk: reply stopped (SIGINT)") != std::string::npos);
  // The first reply is a beginning of the whole one, cut short, then the second follows.
  const std::string whole =
      test::reply_of(test::generated("", test::render_chat("", {}, "In the beginning"), 200));
  const size_t cut = out.find('\n');
  REQUIRE(cut != std::string::npos);
  CHECK(cut < whole.size());
  CHECK(whole.compare(0, cut, out, 0, cut) == 0);
  CHECK(out.size() > cut + 1);
  CHECK(test::no_validation_messages({0, "", chat.err()}));

  // A reply, then SIGINT while chat waits for the next line: it leaves, as a signal ends it.
  REQUIRE(mkfifo((dir / "in2").c_str(), 0600) == 0);
  test::Background idle({"chat", "--temp", "0", "-n", "8"}, {}, (dir / "in2").string());
  Writer in(dir / "in2");
  in.line("In the beginning");
  REQUIRE(await([&] { return idle.out().size() > 1 && idle.out().back() == '\n'; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // back at the prompt
  CHECK(idle.stop(SIGINT, 60) == 128 + SIGINT);
}

TEST_CASE("chat: options it refuses, and a folder's own chat template noted") {
  const test::CliResult big = test::gpt2vk({"chat", "-n", "256"}, {}, "hi\n");
  CHECK(big.exit_code == 1);
  CHECK(big.err.find("-n 256 leaves no room for the conversation in the model's context of 256 "
                     "tokens; give -n below 256") != std::string::npos);
  const test::CliResult zero = test::gpt2vk({"chat", "-n", "0"}, {}, "hi\n");
  CHECK(zero.exit_code != 0);
  CHECK(zero.err.find("-n") != std::string::npos);
  const test::CliResult bad = test::gpt2vk({"chat", "--system", "caf\xc3("}, {}, "hi\n");
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("--system: invalid UTF-8 at byte 3") != std::string::npos);

  // The demo model with a Jinja template beside it: a note, then the plain template.
  test::TempDir dir;
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(test::source_dir() / "models/kjv" / f, dir / f);
  test::write_file(dir / "tokenizer_config.json", R"({"chat_template": "{{ messages }}"})");
  const test::CliResult noted =
      test::gpt2vk({"chat", "-m", dir.path().string(), "--temp", "0", "-n", "8"}, {}, "hi\n\xff\n");
  CHECK(noted.exit_code == 0);
  CHECK(noted.err.find("the folder's chat_template (Jinja) is not rendered") != std::string::npos);
  CHECK(noted.err.find("that line is not valid UTF-8 (at byte 0); not sent") != std::string::npos);
  CHECK(noted.out ==
        test::reply_of(test::generated(dir.path().string(), "User: hi\nAssistant:", 8)) + "\n");
}
