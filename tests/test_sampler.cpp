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
