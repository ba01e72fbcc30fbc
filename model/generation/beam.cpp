#include "model/generation/beam.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace model {

namespace {

// HF's sentinel for "not a candidate": added, not assigned, so that a score keeps its order
// among the others it was added to. The arithmetic below follows transformers' step for step
// (in double where it runs float32), since the ids must agree exactly.
constexpr double kNeg = -1.0e9;

// The k best of `scores` (k <= size), best first, equal scores in index order: torch.topk leaves
// ties unordered; the reference (seq2seq_ref.py stable_topk) breaks them this same way.
std::vector<uint32_t> top_k(std::span<const double> scores, size_t k) {
  std::vector<uint32_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0u);
  const auto better = [&](uint32_t a, uint32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  if (k < idx.size()) std::nth_element(idx.begin(), idx.begin() + long(k), idx.end(), better);
  idx.resize(k);
  std::sort(idx.begin(), idx.end(), better);
  return idx;
}

// The logits processors generate() builds from these settings, on one beam's scores [V] after
// `seq` (start included): no_repeat_ngram bans every id that would complete an n-gram already in
// seq; at the last step forced eos leaves only the eos, at 0.
void process(const BeamSettings& s, std::span<const int32_t> seq, size_t max_length, std::span<double> row) {
  const size_t n = s.no_repeat_ngram, t = seq.size();
  if (n > 0 && t + 1 >= n) {
    const auto prefix = seq.subspan(t - (n - 1));
    for (size_t i = 0; i + n <= t; i++)
      if (std::equal(prefix.begin(), prefix.end(), seq.begin() + long(i)))
        row[size_t(seq[i + n - 1])] = -INFINITY;
  }
  if (s.forced_eos && t == max_length - 1) {
    std::fill(row.begin(), row.end(), -INFINITY);
    row[size_t(*s.forced_eos)] = 0;
  }
}

void check(const BeamSettings& s, uint32_t vocab) {
  const auto fail = [](const std::string& what) { throw std::invalid_argument("beam search: " + what); };
  if (s.beams == 0 || s.beams > 64) fail("beams must be 1..64, not " + std::to_string(s.beams));
  if (s.max_new_tokens == 0) fail("max_new_tokens must be at least 1");
  // Each step keeps 2 * beams candidates (room for every beam to end at eos and still leave
  // `beams` running), so the vocabulary must hold that many.
  if (s.beams > 1 && uint64_t{2} * s.beams > vocab)
    fail(std::to_string(s.beams) + " beams need a vocabulary of at least " + std::to_string(2 * s.beams) +
         " ids, not " + std::to_string(vocab));
  if (vocab == 0) fail("the vocabulary is empty");
  const auto id = [&](const char* name, int64_t v) {
    if (v < 0 || v >= vocab)
      fail(std::string(name) + " " + std::to_string(v) + " is outside the vocabulary of " + std::to_string(vocab));
  };
  id("start", s.start);
  if (s.eos != -1) id("eos", s.eos);
  if (s.forced_eos) id("forced_eos", *s.forced_eos);
  if (!std::isfinite(s.length_penalty)) fail("length_penalty must be finite");
}

// Calls the step and checks what it wrote: [n, vocab] logits, none NaN.
void run_step(const BeamStep& step, std::span<const uint32_t> parents, std::span<const int32_t> tokens,
              uint32_t vocab, std::vector<float>& logits) {
  logits.assign(size_t(parents.size()) * vocab, 0.0f);
  step(parents, tokens, logits);
  if (logits.size() != size_t(parents.size()) * vocab)
    throw std::runtime_error("beam search: the step wrote " + std::to_string(logits.size()) + " logits, not " +
                             std::to_string(parents.size()) + " x " + std::to_string(vocab));
  for (size_t i = 0; i < logits.size(); i++)
    if (std::isnan(logits[i]))
      throw std::runtime_error("beam search: the step's logit " + std::to_string(i % vocab) + " of beam " +
                               std::to_string(i / vocab) + " is NaN");
}

// generate()'s greedy search: the best id each step (the lower among equals), until eos or the
// limit.
std::vector<int32_t> greedy(const BeamSettings& s, uint32_t vocab, const BeamStep& step) {
  const size_t max_length = 1 + size_t(s.max_new_tokens);
  std::vector<int32_t> seq{s.start};
  std::vector<float> logits;
  std::vector<double> row(vocab);
  const uint32_t parent = 0;
  while (seq.size() < max_length) {
    run_step(step, {&parent, 1}, {&seq.back(), 1}, vocab, logits);
    std::copy(logits.begin(), logits.end(), row.begin());
    process(s, seq, max_length, row);
    seq.push_back(int32_t(top_k(row, 1)[0]));
    if (seq.back() == s.eos) break;
  }
  return seq;
}

// log_softmax of one row, in double: x - max - log(sum(exp(x - max))).
void log_softmax(std::span<const float> x, std::span<double> out) {
  const double m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (const float v : x) sum += std::exp(double(v) - m);
  const double log_sum = std::log(sum);
  for (size_t i = 0; i < x.size(); i++) out[i] = double(x[i]) - m - log_sum;
}

}  // namespace

std::vector<int32_t> beam_search(const BeamSettings& s, uint32_t vocab, const BeamStep& step) {
  check(s, vocab);
  if (s.beams == 1) return greedy(s, vocab, step);
  const size_t K = s.beams, keep = 2 * K, V = vocab, max_length = 1 + size_t(s.max_new_tokens);
  const double lp = s.length_penalty;
  const bool early = s.early_stopping == BeamSettings::Stop::Early;

  // Running beams: their ids and sum(log p); at first beam 0 alone counts (the others, copies
  // of it, sit at kNeg so that the first step's candidates all come from beam 0).
  std::vector<std::vector<int32_t>> running(K, std::vector<int32_t>{s.start});
  std::vector<double> run_scores(K, kNeg);
  run_scores[0] = 0;
  // Finished hypotheses: `beams` slots, penalised scores; a slot not yet filled holds kNeg.
  std::vector<std::vector<int32_t>> fin(K, std::vector<int32_t>{s.start});
  std::vector<double> fin_scores(K, kNeg);
  std::vector<char> is_fin(K, 0);
  bool unsatisfied = true;  // the early-stop heuristic: can a running beam still do better?

  std::vector<uint32_t> parents(K, 0);
  std::vector<int32_t> tokens(K, s.start);
  std::vector<float> logits;
  std::vector<double> scores(K * V);
  for (size_t cur = 1;; cur++) {  // cur: ids in every running beam
    run_step(step, parents, tokens, vocab, logits);
    for (size_t b = 0; b < K; b++) {
      const std::span<double> row(scores.data() + b * V, V);
      log_softmax({logits.data() + b * V, V}, row);
      process(s, running[b], max_length, row);
      for (double& x : row) x += run_scores[b];
    }
    // The 2K best continuations over all beams; a candidate hits a stopping criterion at eos
    // or at the length limit.
    const std::vector<uint32_t> cand = top_k(scores, keep);
    std::vector<double> top(keep), pen(keep);
    std::vector<char> hits(keep), just(keep);
    for (size_t i = 0; i < keep; i++) {
      top[i] = scores[cand[i]];
      hits[i] = int32_t(cand[i] % V) == s.eos || cur + 1 >= max_length;
    }
    const auto extend = [&](size_t i) {
      std::vector<int32_t> seq = running[cand[i] / V];
      seq.push_back(int32_t(cand[i] % V));
      return seq;
    };

    // Finished: of the top K candidates only (the others are spares for the running set),
    // those that stopped, at sum(log p) / generated^length_penalty (cur + 1 ids, less the
    // start); merged with the finished ones so far, the best K kept. No candidate enters once
    // early stopping is met or the heuristic has said no running beam can do better.
    const bool all_fin = std::all_of(is_fin.begin(), is_fin.end(), [](char f) { return f != 0; });
    const double length_scale = std::pow(double(cur), lp);
    for (size_t i = 0; i < keep; i++) {
      just[i] = hits[i] && i < K;
      pen[i] = top[i] / length_scale;
      pen[i] += double(all_fin && early) * kNeg;
      pen[i] += double(!unsatisfied) * kNeg;
      pen[i] += double(!just[i]) * kNeg;
    }
    std::vector<double> merged(fin_scores);
    merged.insert(merged.end(), pen.begin(), pen.end());
    const std::vector<uint32_t> best = top_k(merged, K);

    // Running next: the K best candidates that did not stop.
    std::vector<double> go(keep);
    for (size_t i = 0; i < keep; i++) go[i] = top[i] + double(hits[i]) * kNeg;
    const std::vector<uint32_t> next = top_k(go, K);

    std::vector<std::vector<int32_t>> new_fin(K);
    std::vector<double> new_fin_scores(K);
    std::vector<char> new_is_fin(K);
    for (size_t k = 0; k < K; k++) {
      const uint32_t m = best[k];
      new_fin[k] = m < K ? fin[m] : extend(m - K);
      new_fin_scores[k] = merged[m];
      new_is_fin[k] = m < K ? is_fin[m] : just[m - K];
    }
    std::vector<std::vector<int32_t>> new_running(K);
    for (size_t k = 0; k < K; k++) {
      new_running[k] = extend(next[k]);
      run_scores[k] = go[next[k]];
      parents[k] = cand[next[k]] / uint32_t(V);
      tokens[k] = int32_t(cand[next[k]] % V);
    }
    running = std::move(new_running);
    fin = std::move(new_fin);
    fin_scores = std::move(new_fin_scores);
    is_fin = std::move(new_is_fin);

    // The heuristic: the best running beam at the best length it could reach (its own, or for
    // Never with a positive penalty the limit) against the worst finished one, per slot: an
    // unfilled slot counts as kNeg.
    const size_t length = s.early_stopping == BeamSettings::Stop::Never && lp > 0 ? max_length - 1 : cur;
    const double best_running = run_scores[0] / std::pow(double(length), lp);
    const double worst = *std::min_element(fin_scores.begin(), fin_scores.end());
    bool any_better = false;
    for (size_t k = 0; k < K; k++) any_better |= best_running > (is_fin[k] ? worst : kNeg);
    unsatisfied = unsatisfied && any_better;
    const bool now_all_fin = std::all_of(is_fin.begin(), is_fin.end(), [](char f) { return f != 0; });
    const bool open = !(now_all_fin && early);
    const bool all_hit = std::all_of(hits.begin(), hits.end(), [](char h) { return h != 0; });
    if (!(unsatisfied && open && !all_hit)) break;
  }
  if (!is_fin[0]) throw std::runtime_error("beam search: no hypothesis finished (every continuation was banned)");
  return fin[0];
}

}  // namespace model
