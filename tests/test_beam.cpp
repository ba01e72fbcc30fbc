// Beam search (model/generation/beam.h) against the PyTorch reference of HF's generate():
// tools/reference/seq2seq_ref.py searched the toy decoder below with every setting and wrote the
// ids to tests/data/beam/goldens.json (its --check, the ctest reference_seq2seq, fails when the
// file is not what it writes now). The ids must be identical: no tolerance, since both sides run
// the same double arithmetic on the same float logits.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "model/generation/beam.h"
#include "tests/files.h"

namespace {

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser, as seq2seq_ref.py's mix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// seq2seq_ref.py's toy_logits: a hashed value in [-4, 4) (steps of 2^-21, exact in float) of the
// seed, the last two ids and the id; the eos adds eos_bias + eos_slope * len(seq).
struct Toy {
  uint64_t seed;
  uint32_t vocab;
  int32_t eos;
  double eos_bias, eos_slope;

  void logits(const std::vector<int32_t>& seq, float* out) const {
    const uint64_t a = uint64_t(seq.size() > 1 ? seq[seq.size() - 2] : seq.back()), b = uint64_t(seq.back());
    for (uint32_t v = 0; v < vocab; v++) {
      const uint64_t z = mix64(seed + ((a * vocab + b) * vocab + v + 1) * 0x9e3779b97f4a7c15ull);
      double x = (double(z >> 40) - double(1 << 23)) * 0x1.0p-21;
      if (int32_t(v) == eos) x += eos_bias + eos_slope * double(seq.size());
      out[v] = float(x);
    }
  }
};

// The caller's side of the step protocol: each beam's ids, reordered by `parents` and extended
// by `tokens` as a model would reorder its caches; a wrong parent gives other logits.
struct ToyModel {
  Toy toy;
  std::vector<std::vector<int32_t>> beams{{}};  // the fresh state: no ids yet
  uint32_t calls = 0;

  void step(std::span<const uint32_t> parents, std::span<const int32_t> tokens, std::vector<float>& logits) {
    REQUIRE(logits.size() == parents.size() * toy.vocab);
    std::vector<std::vector<int32_t>> next;
    for (size_t b = 0; b < parents.size(); b++) {
      REQUIRE(parents[b] < beams.size());
      next.push_back(beams[parents[b]]);
      next.back().push_back(tokens[b]);
      toy.logits(next.back(), logits.data() + b * toy.vocab);
    }
    beams = std::move(next);
    calls++;
  }
};

model::BeamSettings settings_of(const nlohmann::json& c) {
  model::BeamSettings s;
  s.beams = c["beams"];
  s.length_penalty = c["length_penalty"];
  const std::string stop = c["early_stopping"];
  s.early_stopping = stop == "true"    ? model::BeamSettings::Stop::Early
                     : stop == "never" ? model::BeamSettings::Stop::Never
                                       : model::BeamSettings::Stop::Heuristic;
  s.no_repeat_ngram = c["no_repeat_ngram"];
  s.max_new_tokens = c["max_new_tokens"];
  s.start = c["start"];
  s.eos = c.value("eos", -1);
  if (c.contains("forced_eos")) s.forced_eos = int32_t(c["forced_eos"]);
  return s;
}

std::vector<int32_t> run(const model::BeamSettings& s, const Toy& toy, uint32_t* calls = nullptr) {
  ToyModel m{toy};
  auto ids = model::beam_search(s, toy.vocab, [&](auto parents, auto tokens, auto& logits) {
    m.step(parents, tokens, logits);
  });
  if (calls) *calls = m.calls;
  return ids;
}

}  // namespace

TEST_CASE("beam search: the reference's ids for every toy case, exactly") {
  const auto goldens = nlohmann::json::parse(test::read_file(test::source_dir() / "tests/data/beam/goldens.json"));
  const auto& cases = goldens["cases"];
  REQUIRE(cases.size() >= 70);  // an emptied file must not pass
  size_t agree = 0;
  for (size_t i = 0; i < cases.size(); i++) {
    const auto& c = cases[i];
    const Toy toy{c["seed"], c["vocab"], c.value("eos", -1), c["eos_bias"], c["eos_slope"]};
    const std::vector<int32_t> expected = c["expected"];
    const std::vector<int32_t> got = run(settings_of(c), toy);
    CAPTURE(i);
    CAPTURE(c.dump());
    CHECK(got == expected);
    agree += got == expected;
  }
  MESSAGE(agree << " of " << cases.size() << " toy cases agree with seq2seq_ref.py");
}

TEST_CASE("beam search: one model call per generated token, fewer when it stops early") {
  const Toy toy{7, 50, 2, -1.0, 0.25};
  model::BeamSettings s;
  s.max_new_tokens = 9;
  s.eos = 2;
  uint32_t calls = 0;
  const auto ids = run(s, toy, &calls);
  CHECK(ids.front() == s.start);
  CHECK(calls == ids.size() - 1);  // the last id came from the last call
  s.forced_eos = 2;
  const auto forced = run(s, toy, &calls);
  CHECK(forced.back() == 2);
  CHECK(forced.size() <= 10);
}

TEST_CASE("beam search: settings out of range and bad steps are clear errors") {
  const Toy toy{1, 50, 2, 0.0, 0.0};
  model::BeamSettings s;
  s.max_new_tokens = 4;
  const auto with = [&](auto change) {
    model::BeamSettings t = s;
    change(t);
    return t;
  };
  CHECK_THROWS_WITH_AS(run(with([](auto& t) { t.beams = 0; }), toy), "beam search: beams must be 1..64, not 0",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(with([](auto& t) { t.beams = 65; }), toy), "beam search: beams must be 1..64, not 65",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(with([](auto& t) { t.max_new_tokens = 0; }), toy),
                       "beam search: max_new_tokens must be at least 1", std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(with([](auto& t) { t.beams = 26; }), toy),
                       "beam search: 26 beams need a vocabulary of at least 52 ids, not 50", std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(with([](auto& t) { t.eos = 50; }), toy),
                       "beam search: eos 50 is outside the vocabulary of 50", std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(with([](auto& t) { t.start = -3; }), toy),
                       "beam search: start -3 is outside the vocabulary of 50", std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(with([](auto& t) { t.forced_eos = 99; }), toy),
                       "beam search: forced_eos 99 is outside the vocabulary of 50", std::invalid_argument);
  CHECK_THROWS_WITH_AS(run(with([](auto& t) { t.length_penalty = NAN; }), toy),
                       "beam search: length_penalty must be finite", std::invalid_argument);

  for (const uint32_t beams : {1u, 4u}) {
    CAPTURE(beams);
    s.beams = beams;
    CHECK_THROWS_WITH_AS(model::beam_search(s, 50, [](auto, auto, auto& logits) { logits.resize(7); }),
                         ("beam search: the step wrote 7 logits, not " + std::to_string(beams) + " x 50").c_str(),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(model::beam_search(s, 50, [](auto, auto, auto& logits) { logits[3] = NAN; }),
                         "beam search: the step's logit 3 of beam 0 is NaN", std::runtime_error);
  }
}
