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
  if (text.empty()) throw std::runtime_error(what + " is empty: give some text with --prompt or --file");
  if (auto bad = model::find_invalid_utf8(text))
    throw std::runtime_error(what + ": invalid UTF-8 at byte " + std::to_string(*bad));
  return text;
}

}  // namespace app
