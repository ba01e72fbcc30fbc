#include "tests/chat_fixture.h"

#include <doctest/doctest.h>

#include "tests/cli.h"
#include "tests/files.h"

namespace test {

std::string render_chat(const std::string& system, const std::vector<Turn>& turns,
                        const std::string& next) {
  std::string out = system.empty() ? "" : system + "\n\n";
  for (const auto& [user, reply] : turns) out += "User: " + user + "\nAssistant: " + reply + "\n";
  return out + "User: " + next + "\nAssistant:";
}

std::string generated(const std::string& model, const std::string& prompt, int n) {
  std::vector<std::string> args = {"generate",        "-p",     prompt, "-n",
                                   std::to_string(n), "--temp", "0"};
  if (!model.empty()) args.insert(args.end(), {"-m", model});
  const CliResult r = gpt2vk(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.out.size() > prompt.size());
  return r.out.substr(prompt.size(), r.out.size() - prompt.size() - 1);  // the newline after
}

std::string reply_of(const std::string& continuation) {
  std::string r = continuation.substr(0, continuation.find("\nUser:"));
  if (!r.empty() && r[0] == ' ') r.erase(0, 1);
  return r;
}

std::filesystem::path chat_model(const std::filesystem::path& dir) {
  const char* asks[] = {"peace", "light", "bread", "water", "grace", "truth"};
  std::string text;
  for (int i = 0; i < 400; i++)
    text += std::string("User: ") + asks[i % 6] + "\nAssistant: Peace be with thee.\n";
  write_file(dir / "chat.txt", text);
  const CliResult r = gpt2vk({"train", "-m", (source_dir() / "models/kjv").string(), "--data",
                              (dir / "chat.txt").string(), "-o", (dir / "model").string(),
                              "--steps", "30", "--batch", "4", "--ctx", "64", "--lr", "2e-3",
                              "--sampling", "sequential"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return dir / "model";
}

}  // namespace test
