#include "model/ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/ops/cpu/common.h"

namespace model::cpu {

namespace {

// Throws unless bias and options.bias_span agree and the table reaches every distance of L
// positions.
void check_bias(const AttentionSpec& options, const float* bias, size_t L) {
  const size_t span = options.bias_span;
  if (span == 0 && bias)
    throw std::invalid_argument("cpu::attention: a relative position bias table with bias_span 0");
  if (span == 0) return;
  if (!bias)
    throw std::invalid_argument("cpu::attention: bias_span = " + std::to_string(span) +
                                " but no relative position bias table");
  if (span % 2 == 0)
    throw std::invalid_argument("cpu::attention: the relative position bias's bias_span = " +
                                std::to_string(span) + " is even; it must be 2R + 1");
  if (L > 0 && span / 2 < L - 1)
    throw std::invalid_argument(
        "cpu::attention: the relative position bias reaches R = " + std::to_string(span / 2) +
        ", but L = " + std::to_string(L) + " positions need R >= " + std::to_string(L - 1));
}

}  // namespace

void attention(float* out, const float* q, size_t q_stride, const float* k_cache,
               const float* v_cache, size_t T, size_t L, size_t C, size_t H,
               const AttentionSpec& options, float* probs, const float* bias) {
  check_bias(options, bias, L);
  const size_t span = options.bias_span, R = span / 2;
  const size_t D = C / H;
  const double scale =
      options.scale != 0 ? double{options.scale} : 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> w(L), acc(D);
  for (size_t t = 0; t < T; t++) {
    const size_t n = options.causal ? L - T + t + 1 : L;  // visible keys
    const size_t p = L - T + t;                           // the query's position
    for (size_t h = 0; h < H; h++) {
      const float* qh = q + t * q_stride + h * D;
      // Head h's bias row, at distance 0 from this query: entry j is key j's (j - p in -R .. R).
      const float* bias_row = bias ? bias + h * span + R - p : nullptr;
      double m = -INFINITY;
      for (size_t j = 0; j < n; j++) {
        const float* kh = k_cache + j * C + h * D;
        double s = 0;
        for (size_t d = 0; d < D; d++) s += double{qh[d]} * double{kh[d]};
        w[j] = s * scale;
        if (bias_row) w[j] += double{bias_row[j]};
        m = std::max(m, w[j]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < n; j++) {
        const double e = std::exp(w[j] - m);
        const float* vh = v_cache + j * C + h * D;
        sum += e;
        for (size_t d = 0; d < D; d++) acc[d] += e * double{vh[d]};
      }
      for (size_t d = 0; d < D; d++) out[t * C + h * D + d] = static_cast<float>(acc[d] / sum);
      if (probs) {
        float* row = probs + (h * T + t) * L;
        for (size_t j = 0; j < L; j++)
          row[j] = j < n ? static_cast<float>(std::exp(w[j] - m) / sum) : 0.0f;
      }
    }
  }
}

namespace {

// What training's attention refuses, for both directions.
void check_sequences(const char* op, const SequenceRows& r, const AttentionSpec& spec,
                     const uint32_t* key_lens) {
  if (spec.bias_span != 0)
    throw std::invalid_argument(std::string(op) +
                                ": relative position bias has no training kernels yet");
  if (spec.causal && r.S != r.T)
    throw std::invalid_argument(std::string(op) + ": causal attention needs S = T, got S = " +
                                std::to_string(r.S) + ", T = " + std::to_string(r.T));
  if (r.H == 0 || r.C % r.H != 0)
    throw std::invalid_argument(std::string(op) + ": C = " + std::to_string(r.C) +
                                " is not a multiple of H = " + std::to_string(r.H));
  if (key_lens && spec.causal)
    throw std::invalid_argument(std::string(op) + ": key lengths are not for causal attention");
  for (uint32_t b = 0; key_lens && b < r.B; b++)
    if (key_lens[b] == 0 || key_lens[b] > r.S)
      throw std::invalid_argument(std::string(op) + ": sequence " + std::to_string(b) + " has " +
                                  std::to_string(key_lens[b]) +
                                  " keys, not 1 to S = " + std::to_string(r.S));
}

// Sequence b's keys: its key_lens, or all S.
size_t keys_of(const SequenceRows& r, const uint32_t* key_lens, size_t b) {
  return key_lens ? key_lens[b] : r.S;
}

}  // namespace

void attention_sequences(float* out, const float* q, const float* k, const float* v,
                         const SequenceRows& r, const AttentionSpec& spec,
                         const uint32_t* key_lens) {
  check_sequences("cpu::attention_sequences", r, spec, key_lens);
  const size_t C = r.C;
  std::vector<float> k_cache(size_t{r.S} * C), v_cache(size_t{r.S} * C);
  for (size_t b = 0; b < r.B; b++) {
    for (size_t j = 0; j < r.S; j++)
      for (size_t i = 0; i < C; i++) {
        const size_t row = (b * r.S + j) * r.kv_stride;
        k_cache[j * C + i] = k[row + r.k_col + i];
        v_cache[j * C + i] = v[row + r.v_col + i];
      }
    attention(out + b * r.T * C, q + b * r.T * r.q_stride + r.q_col, r.q_stride, k_cache.data(),
              v_cache.data(), r.T, keys_of(r, key_lens, b), C, r.H, spec);
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const SequenceRows& r,
                        const AttentionSpec& spec, const uint32_t* key_lens) {
  check_sequences("cpu::attention_backward", r, spec, key_lens);
  const size_t C = r.C, H = r.H, D = C / H, T = r.T, S = r.S;
  const double scale = spec.scale != 0 ? wide(spec.scale) : 1.0 / std::sqrt(static_cast<double>(D));
  // One sequence's gradients [T, C] and [S, C], then written to their places.
  std::vector<double> gq(T * C), gk(S * C), gv(S * C), p(S), dp(S);
  for (size_t b = 0; b < r.B; b++) {
    const auto Q = [&](size_t t) { return q + (b * T + t) * r.q_stride + r.q_col; };
    const auto K = [&](size_t j) { return k + (b * S + j) * r.kv_stride + r.k_col; };
    const auto V = [&](size_t j) { return v + (b * S + j) * r.kv_stride + r.v_col; };
    const float* dy = dout + b * T * C;
    std::fill(gq.begin(), gq.end(), 0.0);
    std::fill(gk.begin(), gk.end(), 0.0);
    std::fill(gv.begin(), gv.end(), 0.0);
    for (size_t h = 0; h < H; h++)
      for (size_t t = 0; t < T; t++) {
        const size_t L = spec.causal ? t + 1 : keys_of(r, key_lens, b);  // keys this query sees
        const float* qt = Q(t) + h * D;
        double mx = -INFINITY;
        for (size_t j = 0; j < L; j++) {
          double s = 0;
          for (size_t i = 0; i < D; i++) s += wide(qt[i]) * wide(K(j)[h * D + i]);
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double total = 0;
        for (size_t j = 0; j < L; j++) total += (p[j] = std::exp(p[j] - mx));
        double p_dp = 0;  // sum of p_j dp_j
        for (size_t j = 0; j < L; j++) {
          p[j] /= total;
          double s = 0;
          for (size_t i = 0; i < D; i++) {
            s += wide(dy[t * C + h * D + i]) * wide(V(j)[h * D + i]);
            gv[j * C + h * D + i] += p[j] * wide(dy[t * C + h * D + i]);
          }
          dp[j] = s;
          p_dp += p[j] * s;
        }
        for (size_t j = 0; j < L; j++) {
          const double ds = p[j] * (dp[j] - p_dp) * scale;  // d score, times the scale
          for (size_t i = 0; i < D; i++) {
            gq[t * C + h * D + i] += ds * wide(K(j)[h * D + i]);
            gk[j * C + h * D + i] += ds * wide(qt[i]);
          }
        }
      }
    for (size_t t = 0; t < T; t++)
      for (size_t i = 0; i < C; i++)
        dq[(b * T + t) * r.q_stride + r.q_col + i] = narrow(gq[t * C + i]);
    for (size_t j = 0; j < S; j++)
      for (size_t i = 0; i < C; i++) {
        const size_t row = (b * S + j) * r.kv_stride;
        dk[row + r.k_col + i] = narrow(gk[j * C + i]);
        dv[row + r.v_col + i] = narrow(gv[j * C + i]);
      }
  }
}

}  // namespace model::cpu
