#include "model/training/pairs.h"

#include <algorithm>
#include <stdexcept>

#include "model/ops/types.h"

namespace model::training {

Pairs read_pairs(const std::string& file, std::string_view text, const Encode& source,
                 const Encode& target, std::optional<int32_t> pad) {
  Pairs p;
  uint64_t line_no = 0;
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
    if (s.empty() || t.empty())
      throw std::runtime_error(at + "the " + (s.empty() ? "source" : "target") +
                               " comes to no tokens");
    if (pad && std::find(s.begin(), s.end(), *pad) != s.end())
      throw std::runtime_error(at + "the source holds the pad token (id " + std::to_string(*pad) +
                               "), which a step reads as padding");
    p.S = std::max(p.S, static_cast<uint32_t>(s.size()));
    p.T = std::max(p.T, static_cast<uint32_t>(t.size()));
    p.sources.insert(p.sources.end(), s.begin(), s.end());
    p.targets.insert(p.targets.end(), t.begin(), t.end());
    p.source_at.push_back(p.sources.size());
    p.target_at.push_back(p.targets.size());
  }
  if (!p.size()) throw std::runtime_error(file + ": no pairs (lines of \"source<TAB>target\")");
  return p;
}

void gather_pairs(const Pairs& pairs, const std::vector<uint64_t>& rows, const PairLayout& l,
                  std::vector<int32_t>& sources, std::vector<int32_t>& inputs,
                  std::vector<int32_t>& targets) {
  sources.clear(), inputs.clear(), targets.clear();
  for (uint64_t r : rows) {
    const std::span<const int32_t> s = pairs.source(r), t = pairs.target(r);
    if (s.size() > l.S || t.size() > l.T)
      throw std::invalid_argument("pair " + std::to_string(r) + " is longer than a step's S = " +
                                  std::to_string(l.S) + " and T = " + std::to_string(l.T));
    if (!l.pad && (s.size() < l.S || t.size() < l.T))
      throw std::invalid_argument(
          "pairs of different lengths need padding, and the model has no pad_token_id");
    const int32_t pad = l.pad.value_or(0);
    sources.insert(sources.end(), s.begin(), s.end());
    sources.insert(sources.end(), l.S - s.size(), pad);
    inputs.push_back(l.decoder_start);
    inputs.insert(inputs.end(), t.begin(), t.end() - 1);
    inputs.insert(inputs.end(), l.T - t.size(), pad);
    targets.insert(targets.end(), t.begin(), t.end());
    targets.insert(targets.end(), l.T - t.size(), ignore_target);
  }
}

size_t real_targets(std::span<const int32_t> targets) {
  return static_cast<size_t>(
      std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t != ignore_target; }));
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
