// T5's relative position bias, laid out for the attention op: each stack's learned table
// [buckets, H] (block 0's relative_attention_bias) expanded once, as the checkpoint presents its
// tensors (seq2seq_tensors.cpp), into one row per head
// over every relative position the context allows, so that a kernel adds
// bias[h][R + (key - query)] to each score without computing a bucket (AttentionSpec::bias_span).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/formats/config.h"

namespace model {

// The bucket of rel = key - query, as transformers' T5Attention._relative_position_bucket:
// bidirectional (an encoder) halves the buckets between later and earlier keys; causal (a
// decoder) sees only earlier ones (later keys share bucket 0). Distances below half a side's
// buckets are exact, then logarithmic up to max_distance, then the last bucket. The logarithm
// runs in float32, as transformers runs it, so the edges fall where they fall there.
uint32_t relative_bucket(int64_t rel, bool bidirectional, uint32_t buckets, uint32_t max_distance);

// 2 n_ctx - 1: the relative positions key - query of a context of n_ctx, -(n_ctx - 1)..n_ctx - 1.
uint32_t relative_bias_span(const Config& c);

// [H, span]: row h, column n_ctx - 1 + (key - query) = table[bucket][h], for the side of `c`
// (an encoder's side is bidirectional: !c.causal). table: [c.relative_buckets, H].
std::vector<float> relative_bias_rows(const Config& c, std::span<const float> table);

}  // namespace model
