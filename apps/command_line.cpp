#include "apps/command_line.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

namespace app {
namespace {

// Levenshtein's distance: the single-letter insertions, deletions and substitutions between.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); j++) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string_view letters(std::string_view s) {
  const size_t at = s.find_first_not_of('-');
  return at == std::string_view::npos ? std::string_view() : s.substr(at);
}

// "'a'", "'a' or 'b'", "'a', 'b' or 'c'".
std::string either(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); i++)
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + ("'" + names[i] + "'");
  return s;
}

std::vector<std::string> command_names(CLI::App& cli) {
  std::vector<std::string> names;
  for (const CLI::App* c : cli.get_subcommands([](CLI::App*) { return true; }))
    names.push_back(c->get_name());
  return names;
}

// Every name an option of `app` answers to: "--temp", "-n", "--n-predict", ...
std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

// ": did you mean 'x'?" where something is close; "" otherwise.
std::string suggestion(const std::string& typed, const std::vector<std::string>& names) {
  const std::vector<std::string> close = did_you_mean(typed, names);
  return close.empty() ? "" : ": did you mean " + either(close) + "?";
}

// An unknown first word, which CLI11 reports as "A subcommand is required" only.
int unknown_first(CLI::App& cli, const std::string& typed) {
  const std::vector<std::string> commands = command_names(cli);
  std::string all;
  for (const std::string& c : commands) all += (all.empty() ? "" : ", ") + c;
  if (typed[0] == '-')
    std::fprintf(stderr, "gpt2vk: unknown option '%s'%s\n", typed.c_str(),
                 suggestion(typed, option_names(cli)).c_str());
  else
    std::fprintf(stderr, "gpt2vk: unknown command '%s'%s\n", typed.c_str(),
                 suggestion(typed, commands).c_str());
  std::fprintf(stderr, "commands: %s\nRun 'gpt2vk --help' for what each does.\n", all.c_str());
  return static_cast<int>(CLI::ExitCodes::ExtrasError);
}

// What a command did not take: each unknown option with the nearest of its own options.
int unknown_in(const CLI::App& cmd, const CLI::ExtrasError& e) {
  const std::vector<std::string> names = option_names(cmd);
  bool value_next = false;  // an unknown option's value follows it: not reported again
  for (const std::string& x : cmd.remaining()) {
    if (x.size() > 1 && x[0] == '-') {
      const std::string name = x.substr(0, x.find('='));
      std::fprintf(stderr, "gpt2vk %s: unknown option '%s'%s\n", cmd.get_name().c_str(),
                   name.c_str(), suggestion(name, names).c_str());
      value_next = name.size() == x.size();
    } else if (value_next) {
      value_next = false;
    } else {
      std::fprintf(stderr, "gpt2vk %s: unexpected argument '%s'\n", cmd.get_name().c_str(),
                   x.c_str());
    }
  }
  std::fprintf(stderr, "Run 'gpt2vk %s --help' for its options.\n", cmd.get_name().c_str());
  return e.get_exit_code();
}

}  // namespace

std::vector<std::string> did_you_mean(const std::string& typed,
                                      const std::vector<std::string>& names) {
  const std::string_view t = letters(typed);
  if (t.size() < 3) return {};
  std::vector<std::string> out;
  for (const std::string& n : names)
    if (letters(n).starts_with(t)) out.push_back(n);
  if (!out.empty()) return out;
  size_t best = t.size() / 3;  // the furthest still suggested
  for (const std::string& n : names) {
    const size_t d = edit_distance(t, letters(n));
    if (d > best) continue;
    if (d < best) best = d, out.clear();
    out.push_back(n);
  }
  return out;
}

std::optional<int> parse_command_line(CLI::App& cli, int argc, char** argv) {
  if (argc > 1 && argv[1][0] != '\0') {
    const std::string first = argv[1];
    const std::vector<std::string> known = first[0] == '-' ? option_names(cli) : command_names(cli);
    if (std::find(known.begin(), known.end(), first) == known.end())
      return unknown_first(cli, first);
  }
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    for (const CLI::App* c : cli.get_subcommands())
      if (c->parsed()) return unknown_in(*c, e);
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  return std::nullopt;
}

}  // namespace app
