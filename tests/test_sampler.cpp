// The sampler: greedy, top-k, top-p and temperature against distributions computed here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "model/generation/sampler.h"

namespace {

model::Candidates all_logits(std::vector<float> v) { return {{}, std::move(v)}; }

// How often each id comes out of `n` draws.
std::map<int32_t, int> histogram(model::Sampler& s, const model::Candidates& c, int n) {
  std::map<int32_t, int> h;
  for (int i = 0; i < n; i++) h[s.pick(c)]++;
  return h;
}

}  // namespace

TEST_CASE("sampler: greedy takes the largest logit, the lower id among equals") {
  model::Sampler s({0.0f, 40, 0.95f, 1});
  CHECK(s.candidates(50257) == 1);
  CHECK(s.pick(all_logits({0.5f, 3.0f, -1.0f, 3.0f})) == 1);
  CHECK(s.pick({{7}, {2.0f}}) == 7);  // what the GPU's argmax returns
  CHECK(s.pick(all_logits({NAN, -1.0f, -2.0f})) == 1);  // NaN never wins
}

TEST_CASE("sampler: how many candidates to ask for") {
  CHECK(model::Sampler({0.8f, 40, 0.95f, 1}).candidates(50257) == 40);
  CHECK(model::Sampler({0.8f, 40, 0.95f, 1}).candidates(12) == 12);
  CHECK(model::Sampler({0.8f, 0, 0.95f, 1}).candidates(50257) == 0);    // no top-k: all logits
  CHECK(model::Sampler({0.8f, 1000, 0.95f, 1}).candidates(50257) == 0);  // beyond the GPU's top-k
}

TEST_CASE("sampler: the same seed gives the same draws, another seed others") {
  const model::Candidates c = all_logits({1.0f, 1.1f, 0.9f, 1.2f, 0.8f, 1.0f});
  model::Sampler a({1.0f, 0, 1.0f, 42}), b({1.0f, 0, 1.0f, 42}), d({1.0f, 0, 1.0f, 43});
  std::vector<int32_t> da, db, dd;
  for (int i = 0; i < 64; i++) {
    da.push_back(a.pick(c));
    db.push_back(b.pick(c));
    dd.push_back(d.pick(c));
  }
  CHECK(da == db);
  CHECK(da != dd);
}

TEST_CASE("sampler: temperature draws follow softmax(logits / T)") {
  // logits ln(1), ln(2), ln(3), ln(4) at T = 1 give probabilities 0.1, 0.2, 0.3, 0.4; at T = 0.5
  // they square: 1, 4, 9, 16 over 30. 40000 draws: each frequency is within 4 standard
  // deviations (sqrt(p (1 - p) / n) <= 0.0025) of its probability.
  const model::Candidates c =
      all_logits({std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)});
  const int n = 40000;
  for (float temp : {1.0f, 0.5f}) {
    model::Sampler s({temp, 0, 1.0f, 7});
    std::map<int32_t, int> h = histogram(s, c, n);
    double z = 0;
    for (int i = 0; i < 4; i++) z += std::pow(i + 1.0, 1.0 / double{temp});
    for (int i = 0; i < 4; i++) {
      CAPTURE(temp);
      CAPTURE(i);
      CHECK(std::fabs(h[i] / double(n) - std::pow(i + 1.0, 1.0 / double{temp}) / z) < 0.01);
    }
  }
}

TEST_CASE("sampler: top-k and top-p cut the tail") {
  const model::Candidates c =
      all_logits({std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)});
  // top-k 2: only ids 0 and 1, in proportion 4 : 3.
  model::Sampler k2({1.0f, 2, 1.0f, 3});
  std::map<int32_t, int> h = histogram(k2, c, 20000);
  CHECK(h.size() == 2);
  CHECK(std::fabs(h[0] / 20000.0 - 4.0 / 7) < 0.015);
  // top-p 0.65: 0.4 + 0.3 reaches it, so ids 0 and 1 again; top-p 0.75 keeps id 2 too.
  model::Sampler p65({1.0f, 0, 0.65f, 4}), p75({1.0f, 0, 0.75f, 5});
  CHECK(histogram(p65, c, 5000).size() == 2);
  CHECK(histogram(p75, c, 5000).size() == 3);
  // top-p smaller than the best token's mass keeps that token alone.
  model::Sampler p01({1.0f, 0, 0.01f, 6});
  CHECK(histogram(p01, c, 200) == std::map<int32_t, int>{{0, 200}});
}

TEST_CASE("sampler: Hugging Face's order cuts top-p after the temperature") {
  // Probabilities 0.4, 0.3, 0.2, 0.1 at T = 1; at T = 0.5 they square to 16, 9, 4, 1 over 30,
  // so 0.533 + 0.3 = 0.833 reaches top-p 0.8 with two ids, where llama.cpp's order (top-p at
  // T = 1: 0.4 + 0.3 + 0.2) keeps three. The kept ids are drawn as softmax(logits / T), 16 : 9.
  const model::Candidates c =
      all_logits({std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)});
  model::SamplerOptions o{0.5f, 0, 0.8f, 8};
  model::Sampler llama(o);
  CHECK(histogram(llama, c, 5000).size() == 3);
  o.temperature_first = true;
  model::Sampler hf(o);
  std::map<int32_t, int> h = histogram(hf, c, 20000);
  CHECK(h.size() == 2);
  CHECK(std::fabs(h[0] / 20000.0 - 16.0 / 25) < 0.015);
}

TEST_CASE("sampler: Hugging Face's top-k keeps the logits tied with the k-th") {
  // top-k 2 over 2, 1, 1, 1, 0: the k-th is 1, tied three times. llama.cpp's chain keeps ids 0
  // and 1 (ties to the lower id); Hugging Face's every id scoring at least 1: 0 to 3.
  const model::Candidates c = all_logits({2.0f, 1.0f, 1.0f, 1.0f, 0.0f});
  model::SamplerOptions o{1.0f, 2, 1.0f, 9};
  model::Sampler llama(o);
  CHECK(histogram(llama, c, 4000).size() == 2);
  o.temperature_first = true;
  model::Sampler hf(o);
  std::map<int32_t, int> h = histogram(hf, c, 4000);
  CHECK(h.size() == 4);
  CHECK(h.count(4) == 0);
}

TEST_CASE("sampler: all V logits give the draws the GPU's top-k candidates give") {
  // 300 logits with repeats (ties go to the lower id either way), and their best 40 as the
  // GPU's top-k returns them, best first: with one seed, the same 200 draws from both.
  std::vector<float> v;
  for (int i = 0; i < 300; i++) v.push_back(static_cast<float>((i * 37) % 50) / 10.0f);
  std::vector<int32_t> order(v.size());
  for (size_t i = 0; i < v.size(); i++) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return v[size_t(a)] > v[size_t(b)]; });
  model::Candidates top;
  for (int i = 0; i < 40; i++) {
    top.ids.push_back(order[size_t(i)]);
    top.logits.push_back(v[size_t(order[size_t(i)])]);
  }
  for (float temp : {0.0f, 0.7f}) {
    model::Sampler a({temp, 40, 0.9f, 11}), b({temp, 40, 0.9f, 11});
    for (int i = 0; i < 200; i++) CHECK(a.pick(all_logits(v)) == b.pick(top));
  }
}

TEST_CASE("sampler: bad options are refused") {
  CHECK_THROWS_WITH(model::Sampler({-1.0f, 40, 0.95f, 1}), doctest::Contains("temperature"));
  CHECK_THROWS_WITH(model::Sampler({0.8f, 40, 0.0f, 1}), doctest::Contains("top-p"));
  CHECK_THROWS_WITH(model::Sampler({0.8f, 40, 1.5f, 1}), doctest::Contains("top-p"));
}

// The penalties against a hand computation. Logits 2, -1, 0.5, 1.5, -0.5, 1 (ids 0..5) and the
// history 0 1 1 4: repeat_penalty 2 halves id 0 (2 -> 1) and doubles the negative ids 1 and 4
// (-1 -> -2, -0.5 -> -1); then presence 0.5 and frequency 0.25 take 0.5 + 0.25 * count from
// the ids seen: id 0 (once) 1 -> 0.25, id 1 (twice) -2 -> -3, id 4 (once) -1 -> -1.75. Every value
// is exact in binary, so the check is ==.
TEST_CASE("sampler: the penalties, by hand") {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 1.5f, -0.5f, 1.0f};
  const std::vector<int32_t> seen = {0, 1, 1, 4};
  model::SamplerOptions o{0.0f, 0, 1.0f, 1};
  o.repeat_penalty = 2.0f;
  std::vector<float> v = logits;
  model::penalize(v, o, {seen, seen});
  CHECK(v == std::vector<float>{1.0f, -2.0f, 0.5f, 1.5f, -1.0f, 1.0f});
  o.presence_penalty = 0.5f;
  o.frequency_penalty = 0.25f;
  v = logits;
  model::penalize(v, o, {seen, seen});
  CHECK(v == std::vector<float>{0.25f, -3.0f, 0.5f, 1.5f, -1.75f, 1.0f});
  // The server's split: repeat_penalty on one span, the counts on another (here none).
  v = logits;
  model::penalize(v, o, {seen, {}});
  CHECK(v == std::vector<float>{1.0f, -2.0f, 0.5f, 1.5f, -1.0f, 1.0f});
  // A negative presence penalty raises what was seen: id 4, -0.5 + 2 = 1.5.
  model::SamplerOptions raise{0.0f, 0, 1.0f, 1};
  raise.presence_penalty = -2.0f;
  v = logits;
  model::penalize(v, raise, {{}, std::vector<int32_t>{4}});
  CHECK(v == std::vector<float>{2.0f, -1.0f, 0.5f, 1.5f, 1.5f, 1.0f});
  // An id outside the vocabulary is an error, not a write past the logits.
  CHECK_THROWS_WITH(model::penalize(v, o, {std::vector<int32_t>{6}, {}}),
                    doctest::Contains("token id 6 is outside the vocabulary of 6"));
}

TEST_CASE("sampler: greedy and top-k pick from the penalized logits") {
  const model::Candidates c = all_logits({2.0f, -1.0f, 0.5f, 1.5f, -0.5f, 1.0f});
  const std::vector<int32_t> seen = {0, 1, 1, 4};
  // Greedy: id 0 alone, 3 once id 0 is penalized (1.5 beats 2 / 2). A penalty needs every logit,
  // even for greedy, so candidates() asks for all of them.
  model::Sampler plain({0.0f, 40, 1.0f, 1});
  CHECK(plain.pick(c, {seen, seen}) == 0);
  model::SamplerOptions o{0.0f, 40, 1.0f, 1};
  o.repeat_penalty = 2.0f;
  model::Sampler greedy(o);
  CHECK(greedy.candidates(50257) == 0);
  CHECK(greedy.pick(c, {seen, seen}) == 3);
  CHECK(greedy.pick(c) == 0);  // nothing seen: nothing penalized
  // A top-k taken before the penalty would hold the wrong set: refused.
  CHECK_THROWS_WITH(greedy.pick({{0, 3}, {2.0f, 1.5f}}, {seen, seen}),
                    doctest::Contains("needs all logits"));
  // top-k 2 after all three penalties (0.25, -3, 0.5, 1.5, -1.75, 1 as above): ids 3 and 5, in
  // proportion e^1.5 : e^1 at T = 1; before them it would have been ids 0 and 3. 20000 draws:
  // within 4 standard deviations.
  o.presence_penalty = 0.5f;
  o.frequency_penalty = 0.25f;
  o.temperature = 1.0f;
  o.top_k = 2;
  model::Sampler k2(o);
  std::map<int32_t, int> h;
  for (int i = 0; i < 20000; i++) h[k2.pick(c, {seen, seen})]++;
  CHECK(h.size() == 2);
  CHECK(h.count(3) == 1);
  CHECK(h.count(5) == 1);
  const double p3 = std::exp(1.5) / (std::exp(1.5) + std::exp(1.0));
  CHECK(std::fabs(h[3] / 20000.0 - p3) < 0.015);
}

TEST_CASE("sampler: the penalty window") {
  const std::vector<int32_t> seq = {1, 2, 3, 4, 5};
  model::SamplerOptions o;
  o.repeat_last_n = 3;
  CHECK(std::ranges::equal(model::Sampler(o).recent(seq, 256), std::vector<int32_t>{3, 4, 5}));
  o.repeat_last_n = 64;  // longer than the sequence: all of it
  CHECK(model::Sampler(o).recent(seq, 256).size() == 5);
  o.repeat_last_n = 0;
  CHECK(model::Sampler(o).recent(seq, 256).empty());
  o.repeat_last_n = -1;  // the context's
  CHECK(std::ranges::equal(model::Sampler(o).recent(seq, 4), std::vector<int32_t>{2, 3, 4, 5}));
}

TEST_CASE("sampler: penalties out of range are refused") {
  auto with = [](auto set) {
    model::SamplerOptions o;
    set(o);
    return o;
  };
  CHECK_THROWS_WITH(model::Sampler(with([](auto& o) { o.repeat_penalty = 0; })),
                    doctest::Contains("repeat penalty must be a finite number > 0"));
  CHECK_THROWS_WITH(model::Sampler(with([](auto& o) { o.repeat_penalty = INFINITY; })),
                    doctest::Contains("repeat penalty"));
  CHECK_THROWS_WITH(model::Sampler(with([](auto& o) { o.repeat_last_n = -2; })),
                    doctest::Contains("repeat-last-n must be -1 or more"));
  CHECK_THROWS_WITH(model::Sampler(with([](auto& o) { o.presence_penalty = 2.5f; })),
                    doctest::Contains("presence penalty must be in [-2, 2]"));
  CHECK_THROWS_WITH(model::Sampler(with([](auto& o) { o.frequency_penalty = NAN; })),
                    doctest::Contains("frequency penalty must be in [-2, 2]"));
}
