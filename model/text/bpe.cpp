#include "model/text/bpe.h"

#include <algorithm>
#include <functional>

namespace model {

bool Bpe::add_merge(int32_t left, int32_t right, int32_t merged) {
  const auto rank = static_cast<uint32_t>(merges_.size());
  return merges_.try_emplace(key(left, right), Merge{rank, merged}).second;
}

const Bpe::Merge* Bpe::find(int32_t left, int32_t right) const {
  auto it = merges_.find(key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

std::optional<uint32_t> Bpe::rank(int32_t left, int32_t right) const {
  const Merge* m = find(left, right);
  if (!m) return std::nullopt;
  return m->rank;
}

void Bpe::encode(std::string_view word, std::vector<int32_t>& out) const {
  const size_t n = word.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  // The word as a linked list of parts; a merge keeps the left part (its index keeps the
  // left-to-right order) and unlinks the right one (token -1).
  constexpr size_t kNone = SIZE_MAX;
  std::vector<int32_t> token(n);
  std::vector<size_t> prev(n), next(n);
  for (size_t i = 0; i < n; i++) {
    token[i] = byte_ids_[static_cast<uint8_t>(word[i])];
    prev[i] = i == 0 ? kNone : i - 1;
    next[i] = i + 1 == n ? kNone : i + 1;
  }

  // Candidate merges, lowest rank first and, within a rank, leftmost first. An entry records
  // the pair it saw; it is stale, and skipped, once either part has changed.
  struct Candidate {
    uint32_t rank;
    size_t pos;
    int32_t left, right;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Candidate> heap, born;
  const auto consider = [&](size_t pos, std::vector<Candidate>& into) {
    if (pos == kNone || next[pos] == kNone) return;
    if (const Merge* m = find(token[pos], token[next[pos]])) {
      into.push_back({m->rank, pos, token[pos], token[next[pos]]});
    }
  };
  for (size_t i = 0; i + 1 < n; i++) consider(i, heap);
  std::make_heap(heap.begin(), heap.end(), std::greater<>{});

  while (!heap.empty()) {
    // encoder.py merges every occurrence of the best pair in one left-to-right pass over the
    // word as it was before the pass, so pairs born in this pass wait until it ends (they can
    // rank lower than the pass's pair when merges.txt is not in training order).
    const uint32_t pass_rank = heap.front().rank;
    while (!heap.empty() && heap.front().rank == pass_rank) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
      const Candidate c = heap.back();
      heap.pop_back();
      const size_t right = next[c.pos];
      if (token[c.pos] != c.left || right == kNone || token[right] != c.right) continue;
      token[c.pos] = find(c.left, c.right)->merged;
      token[right] = -1;
      next[c.pos] = next[right];
      if (next[right] != kNone) prev[next[right]] = c.pos;
      consider(prev[c.pos], born);
      consider(c.pos, born);
    }
    for (const Candidate& c : born) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
    born.clear();
  }
  for (size_t i = 0; i != kNone; i = next[i]) out.push_back(token[i]);
}

}  // namespace model
