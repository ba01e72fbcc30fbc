// Byte-pair merging of one pre-token, on token ids: GPT-2's encoder.py bpe() without strings.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace model {

class Bpe {
 public:
  // byte_ids[b]: the token of the single byte b; every pre-token starts as these.
  explicit Bpe(const std::array<int32_t, 256>& byte_ids) : byte_ids_(byte_ids) {}

  // Ranks the merge (left, right) -> merged after every merge added before it. Returns false,
  // changing nothing, when the pair already has a merge.
  bool add_merge(int32_t left, int32_t right, int32_t merged);
  // The rank of the merge of (left, right), if there is one.
  std::optional<uint32_t> rank(int32_t left, int32_t right) const;

  // Appends the tokens of `word`: repeatedly merge every occurrence of the lowest-ranked adjacent
  // pair, left to right, until no pair has a merge. O(n log n) in the word's length, so a long
  // run of letters or spaces costs no more than its size.
  void encode(std::string_view word, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    uint32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find(int32_t left, int32_t right) const;

  std::array<int32_t, 256> byte_ids_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> rank and result
};

}  // namespace model
