#include <fstream>
#include <sstream>
#include <stdexcept>

#include "apps/commands.h"
#include "model/text/tokenizer.h"
#include "model/text/utf8.h"

namespace app {

std::string read_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(file + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string read_text(const std::string& prompt, const std::string& file) {
  if (!prompt.empty() && !file.empty()) throw std::runtime_error("give --prompt or --file, not both");
  std::string text = prompt, what = "the prompt";
  if (!file.empty()) {
    text = read_file(file);
    what = file;
  }
  // An empty file says so and no more (perplexity, which reads only files, has no --prompt to
  // suggest); an empty or absent prompt names both ways to give one.
  if (text.empty())
    throw std::runtime_error(what + " is empty: " +
                             (file.empty() ? "give some text with --prompt or --file"
                                           : "it holds no text to read"));
  if (auto bad = model::find_invalid_utf8(text))
    throw std::runtime_error(what + ": invalid UTF-8 at byte " + std::to_string(*bad));
  return text;
}

// The texts of --prompt (one) or --file (one per line; a final newline ends the last line, a
// '\r' before it is dropped). Empty texts and invalid UTF-8 are errors naming the line.
std::vector<std::string> read_texts(const std::string& prompt, const std::string& file) {
  if (!prompt.empty() && !file.empty()) throw std::runtime_error("give --prompt or --file, not both");
  if (prompt.empty() && file.empty()) throw std::runtime_error("give a text with --prompt or --file");
  if (!prompt.empty()) return {read_text(prompt, "")};
  const std::string all = read_file(file);
  std::vector<std::string> lines;
  std::istringstream in(all);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = file + ":" + std::to_string(lines.size() + 1);
    if (line.empty()) throw std::runtime_error(where + ": an empty line (one text per line)");
    if (auto bad = model::find_invalid_utf8(line))
      throw std::runtime_error(where + ": invalid UTF-8 at byte " + std::to_string(*bad));
    lines.push_back(std::move(line));
  }
  if (lines.empty()) throw std::runtime_error(file + " is empty: one text per line");
  return lines;
}

}  // namespace app
