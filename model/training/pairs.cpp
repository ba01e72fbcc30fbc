#include "model/training/pairs.h"

#include <algorithm>
#include <stdexcept>

namespace model::training {

Pairs read_pairs(const std::string& file, std::string_view text, const Encode& source,
                 const Encode& target, int32_t decoder_start) {
  Pairs p;
  uint64_t line_no = 0, first_line = 0;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    line_no++;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string at = file + ":" + std::to_string(line_no) + ": ";
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos)
      throw std::runtime_error(at +
                               "no tab: an encoder-decoder trains on lines of "
                               "\"source<TAB>target\"");
    const std::string_view src = line.substr(0, tab), tgt = line.substr(tab + 1);
    if (src.empty() || tgt.empty())
      throw std::runtime_error(at + "an empty " + (src.empty() ? "source" : "target"));
    std::vector<int32_t> s, t;
    try {
      s = source(src);
      t = target(tgt);
    } catch (const std::exception& e) {
      throw std::runtime_error(at + e.what());
    }
    if (!p.S) {
      p.S = static_cast<uint32_t>(s.size());
      p.T = static_cast<uint32_t>(t.size());
      first_line = line_no;
    } else if (s.size() != p.S || t.size() != p.T) {
      throw std::runtime_error(
          at + "a source of " + std::to_string(s.size()) + " tokens and a target of " +
          std::to_string(t.size()) + ", where line " + std::to_string(first_line) + " has " +
          std::to_string(p.S) + " and " + std::to_string(p.T) +
          ": an encoder-decoder trains on pairs of one length (no padding yet)");
    }
    p.sources.insert(p.sources.end(), s.begin(), s.end());
    p.inputs.push_back(decoder_start);
    p.inputs.insert(p.inputs.end(), t.begin(), t.end() - 1);
    p.targets.insert(p.targets.end(), t.begin(), t.end());
  }
  if (!p.S) throw std::runtime_error(file + ": no pairs (lines of \"source<TAB>target\")");
  return p;
}

void gather_pairs(const Pairs& pairs, const std::vector<uint64_t>& rows,
                  std::vector<int32_t>& sources, std::vector<int32_t>& inputs,
                  std::vector<int32_t>& targets) {
  const size_t S = pairs.S, T = pairs.T;
  sources.resize(rows.size() * S);
  inputs.resize(rows.size() * T);
  targets.resize(rows.size() * T);
  for (size_t r = 0; r < rows.size(); r++) {
    const auto at = [](uint64_t i, size_t n) { return static_cast<std::ptrdiff_t>(i * n); };
    std::copy_n(pairs.sources.begin() + at(rows[r], S), S, sources.begin() + at(r, S));
    std::copy_n(pairs.inputs.begin() + at(rows[r], T), T, inputs.begin() + at(r, T));
    std::copy_n(pairs.targets.begin() + at(rows[r], T), T, targets.begin() + at(r, T));
  }
}

std::vector<uint32_t> source_lengths(std::span<const int32_t> sources, uint32_t S,
                                     std::optional<int32_t> pad) {
  std::vector<uint32_t> lens(S ? sources.size() / S : 0, S);
  for (size_t b = 0; pad && b < lens.size(); b++) {
    const int32_t* row = sources.data() + b * S;
    while (lens[b] > 0 && row[lens[b] - 1] == *pad) lens[b]--;
    if (lens[b] == 0)
      throw std::invalid_argument("source " + std::to_string(b) + " of the batch is padding alone");
  }
  return lens;
}

}  // namespace model::training
