// libFuzzer target: trainer_state.json (model/training/run_state.h parse_run_state) on arbitrary
// bytes, then the state checked against a fixed run (check_run_state) and its position given
// to the data order (schedule.h Batches), which once read past the data for a position near
// 2^64, and its generator's state to the random windows (RandomWindows). What parse_run_state
// accepts must read back equal through run_state_json and keep its documented shape; a position
// Batches accepts, and any generator state, must keep every step inside the data.
// A std::runtime_error naming the source is the one acceptable failure of the readers.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/check.h"
#include "model/training/run_state.h"
#include "model/training/schedule.h"

namespace {

constexpr const char* kSource = "fuzz/trainer_state.json";

// The run the state is resumed into: 3,301 tokens, steps of B = 2 sequences of T = 16.
constexpr uint32_t kB = 2, kT = 16;
constexpr uint64_t kTokens = 3301, kSteps = 1000;

// Steps strictly increasing within 1..last, losses finite.
void check_curve(const std::vector<std::pair<uint64_t, double>>& c, uint64_t last) {
  for (size_t i = 0; i < c.size(); ++i) {
    FUZZ_CHECK(c[i].first >= 1 && c[i].first <= last);
    FUZZ_CHECK(i == 0 || c[i].first > c[i - 1].first);
    FUZZ_CHECK(std::isfinite(c[i].second));
  }
}

// A few steps from `position` read only tokens of the data: the sanitizer reports any read
// past it; the values (0..n-1 by index) say where each row came from.
void walk(uint64_t position) {
  static const std::vector<int32_t> tokens = [] {
    std::vector<int32_t> t(kTokens);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i);
    return t;
  }();
  model::training::Batches batches(tokens, kB, kT, position);
  std::vector<int32_t> ids, targets;
  for (int step = 0; step < 3; ++step) {
    batches.next(ids, targets);
    FUZZ_CHECK(ids.size() == size_t{kB} * kT && targets.size() == ids.size());
    FUZZ_CHECK(targets.back() == ids.back() + 1 && uint64_t(targets.back()) < kTokens);
    FUZZ_CHECK(batches.position() < kTokens);
  }
}

// A few steps of random windows from the generator's state: each row a window of the data.
void walk_random(uint64_t state) {
  static const std::vector<int32_t> index = [] {
    std::vector<int32_t> t(kTokens);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i);
    return t;
  }();
  model::training::RandomWindows windows(index, kB, kT, state);
  std::vector<int32_t> ids, targets;
  for (int step = 0; step < 3; ++step) {
    windows.next(ids, targets);
    FUZZ_CHECK(ids.size() == size_t{kB} * kT && targets.size() == ids.size());
    for (uint32_t r = 0; r < kB; ++r) {
      const int32_t first = ids[size_t{r} * kT];
      FUZZ_CHECK(first >= 0 && uint64_t(first) + kT < kTokens);
      FUZZ_CHECK(targets[size_t{r} * kT + kT - 1] == first + int32_t{kT});
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  model::training::RunState s;
  try {
    s = model::training::parse_run_state(text, kSource);
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e, kSource);
    return 0;
  }
  FUZZ_CHECK(model::training::parse_run_state(model::training::run_state_json(s), "round trip") ==
             s);
  FUZZ_CHECK(s.step >= 1);
  check_curve(s.train_loss, s.step);
  check_curve(s.val_loss, s.step);
  bool fits = true;
  try {
    model::training::check_run_state(s, {kTokens, uint64_t{kB} * kT, kSteps}, kSource);
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e, kSource);
    fits = false;
  }
  FUZZ_CHECK(fits == (s.position < kTokens && s.position % (kB * kT) == 0 && s.step <= kSteps &&
                      !s.rng_state));
  // The same state resumed by a run of random windows.
  bool fits_random = true;
  try {
    model::training::check_run_state(s, {kTokens, uint64_t{kB} * kT, kSteps, true}, kSource);
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e, kSource);
    fits_random = false;
  }
  FUZZ_CHECK(fits_random == (s.position == 0 && s.step <= kSteps && s.rng_state.has_value()));
  if (s.rng_state) walk_random(*s.rng_state);
  // The data order guards itself too, whatever the state's checks said.
  try {
    walk(s.position);
    FUZZ_CHECK(s.position < kTokens);
  } catch (const std::invalid_argument&) {
    FUZZ_CHECK(s.position >= kTokens);
  }
  return 0;
}
