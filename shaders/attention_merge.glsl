// The merge of split attention's key blocks, shared by attention_merge.comp and
// attention_split.comp (its last workgroup of a query's head, AttentionPush.merge): out[t, head
// h] from the blocks' partial results (o_b, m_b, l_b). With M the largest block maximum and
// a_b = exp(m_b - M): out = sum_b a_b o_b / sum_b a_b l_b, lanes along the head dim. Needs
// `part` [T, H, splits, D + 2], `out_` [T, C], the push block p and the constant D.

void merge_blocks(uint t, uint h, uint H, uint lane) {
  const uint base = (t * H + h) * p.splits * (D + 2);
  float M = -3.402823466e38;
  for (uint b = 0; b < p.splits; b++) M = max(M, part[base + b * (D + 2) + D]);
  float total = 0.0;
  for (uint b = 0; b < p.splits; b++) {
    const uint at = base + b * (D + 2);
    total += part[at + D + 1] * exp(part[at + D] - M);
  }
  for (uint d = lane; d < D; d += ATTENTION_SPLIT_WG) {
    float o = 0.0;
    for (uint b = 0; b < p.splits; b++) {
      const uint at = base + b * (D + 2);
      o += part[at + d] * exp(part[at + D] - M);
    }
    out_[t * p.C + h * D + d] = o / total;
  }
}
