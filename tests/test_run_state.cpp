// trainer_state.json (model/training/run_state.h) and the data order it points into (issue 35):
// a state round trips; every bad field is refused with "<file>: <field>: <problem>"; a state
// that does not fit the resuming run is refused; the data order stays inside the data for any
// position it accepts (2^64 - 100 once overflowed its check and read past the tokens).
#include <doctest/doctest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/training/run_state.h"
#include "model/training/schedule.h"

namespace {

using model::training::check_run_state;
using model::training::parse_run_state;
using model::training::RunState;

constexpr const char* kFile = "out/trainer_state.json";

// A state's text with one field's JSON replaced (or, with value "", left out).
std::string with(const std::string& field, const std::string& value) {
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"step", "4"},
      {"position", "128"},
      {"settings", "\"data=d.txt batch=2 ctx=16\""},
      {"train_loss", "[[1, 5.5], [2, 5.25], [4, 5.0]]"},
      {"val_loss", "[[4, 5.125]]"}};
  std::string text = "{";
  for (const auto& [k, v] : fields) {
    const std::string& json = k == field ? value : v;
    if (json.empty()) continue;
    text += (text.size() > 1 ? ", \"" : "\"") + k + "\": " + json;
  }
  return text + "}";
}

}  // namespace

TEST_CASE("trainer_state.json: a state reads back as written") {
  const RunState s = parse_run_state(with("", ""), kFile);
  CHECK(s.step == 4);
  CHECK(s.position == 128);
  CHECK(s.settings == "data=d.txt batch=2 ctx=16");
  CHECK(s.train_loss == std::vector<std::pair<uint64_t, double>>{{1, 5.5}, {2, 5.25}, {4, 5.0}});
  CHECK(s.val_loss == std::vector<std::pair<uint64_t, double>>{{4, 5.125}});
  CHECK(parse_run_state(model::training::run_state_json(s), kFile) == s);
  // Checkpoints from before the losses were kept have no curves.
  const RunState old = parse_run_state(R"({"step": 2, "position": 64, "settings": "s"})", kFile);
  CHECK(old.train_loss.empty());
  CHECK(old.val_loss.empty());
  // The largest position the format holds reads as it is; whether it fits the run is checked apart.
  CHECK(parse_run_state(with("position", "18446744073709551615"), kFile).position == UINT64_MAX);
}

TEST_CASE("trainer_state.json: every bad field is refused, naming the file and the field") {
  const auto refused = [](const std::string& text, const std::string& message) {
    // "<file>: " first, then the message; one line.
    const std::string want = std::string(kFile) + ": ";
    CHECK_THROWS_WITH_AS(parse_run_state(text, kFile), doctest::Contains(message.c_str()),
                         std::runtime_error);
    try {
      parse_run_state(text, kFile);
    } catch (const std::runtime_error& e) {
      CHECK_MESSAGE(std::string(e.what()).rfind(want, 0) == 0, e.what());
      CHECK_MESSAGE(std::string(e.what()).find('\n') == std::string::npos, e.what());
    }
  };
  refused("", "invalid JSON");
  refused("{\"step\": 4", "invalid JSON");
  refused("[]", "a JSON array, not an object");
  refused(with("step", ""), "step: missing");
  refused(with("position", ""), "position: missing");
  refused(with("settings", ""), "settings: missing");
  refused(with("step", "0"), "step: must be at least 1");
  refused(with("step", "-4"), "step: must be a whole number from 0 to 2^64 - 1, got -4");
  refused(with("step", "4.5"), "step: must be a whole number from 0 to 2^64 - 1, got 4.5");
  refused(with("step", "\"4\""), "step: must be a whole number from 0 to 2^64 - 1, got string 4");
  // -1 is not 2^64 - 1, and 2^64 (a float to the parser) is not 0.
  refused(with("position", "-1"), "position: must be a whole number from 0 to 2^64 - 1, got -1");
  refused(with("position", "18446744073709551616"), "position: must be a whole number");
  refused(with("position", "null"),
          "position: must be a whole number from 0 to 2^64 - 1, got null");
  refused(with("settings", "5"), "settings: must be a string, got 5");
  refused(with("train_loss", "{}"),
          "train_loss: must be an array of [step, loss] pairs, got an object");
  refused(with("train_loss", "[[1, 5.5, 3]]"), "train_loss[0]: must be a [step, loss] pair");
  refused(with("train_loss", "[[0, 5.5]]"), "train_loss[0]: step 0 is outside 1..4");
  refused(with("train_loss", "[[5, 5.5]]"), "train_loss[0]: step 5 is outside 1..4");
  refused(with("train_loss", "[[2, 5.5], [2, 5.5]]"),
          "train_loss[1]: step 2 does not follow step 2");
  refused(with("train_loss", "[[-1, 5.5]]"), "train_loss[0]: must be a whole number");
  refused(with("val_loss", "[[1, null]]"),
          "val_loss[0]: the loss must be a finite number, got null");
  refused(with("val_loss", "[[1, \"x\"]]"),
          "val_loss[0]: the loss must be a finite number, got string x");
  refused(with("", "") + "x", "invalid JSON");
  refused("{\"step\": 4, \"position\": 0, \"settings\": \"s\", \"stepp\": 1}",
          "stepp: is not a field of a run state");
}

TEST_CASE("trainer_state.json: a state that does not fit the resuming run is refused") {
  RunState s = parse_run_state(with("", ""), kFile);
  const model::training::RunBounds run{3300, 32, 8};  // 3,300 tokens, B x T = 32, --steps 8
  CHECK_NOTHROW(check_run_state(s, run, kFile));
  const auto refused = [&](uint64_t step, uint64_t position, const std::string& message) {
    RunState bad = s;
    bad.step = step, bad.position = position;
    CHECK_THROWS_WITH_AS(check_run_state(bad, run, kFile),
                         doctest::Contains((std::string(kFile) + ": " + message).c_str()),
                         std::runtime_error);
  };
  refused(4, UINT64_MAX - 99,
          "position: 18446744073709551516 is past the data's last token (it holds 3300");
  refused(4, 3300, "position: 3300 is past the data's last token");
  refused(4, 33, "position: 33 is not a multiple of the 32 tokens a step takes");
  refused(9, 128, "step: 9 is past --steps 8 (give --steps 9 or more)");
  s.step = 8;  // a finished run resumed with the same --steps does nothing more
  CHECK_NOTHROW(check_run_state(s, run, kFile));
}

TEST_CASE("the data order refuses a position past the data and never reads past it") {
  std::vector<int32_t> tokens(23);
  for (int32_t i = 0; i < 23; i++) tokens[size_t(i)] = i;
  // 2^64 - 100 + B T + 1 once wrapped to a small number, passed the end-of-data check and read
  // ~2^64 tokens ahead.
  for (const uint64_t position : {UINT64_MAX - 99, UINT64_MAX, uint64_t{23}})
    CHECK_THROWS_WITH_AS(model::training::Batches(tokens, 2, 5, position),
                         doctest::Contains("is past the data's 23 tokens"), std::invalid_argument);
  // Every position inside the data: the step stays inside it (B T = 10, so 12 and up wrap to 0).
  for (uint64_t position = 0; position < 23; position++) {
    model::training::Batches batches(tokens, 2, 5, position);
    std::vector<int32_t> ids, targets;
    batches.next(ids, targets);
    CHECK(ids.front() == (position + 11 > 23 ? 0 : int32_t(position)));
    CHECK(targets.back() <= 22);
  }
}

namespace {

// A run's flags as `gpt2vk train` records them (paths absolute).
model::training::RunFlags run_flags() {
  model::training::RunFlags f;
  f.data = "/runs/the data.txt";  // a space, as a path may have
  f.batch = 2, f.ctx = 16, f.lr = 3e-3f, f.seed = 7, f.steps = 6;
  f.init = "/runs/config.json";
  return f;
}

// with()'s state, at step 4 of a run with `flags`.
std::string with_flags(const model::training::RunFlags& f) {
  RunState s = parse_run_state(with("", ""), kFile);
  s.settings = model::training::settings_line(f);
  s.flags = f;
  return model::training::run_state_json(s);
}

}  // namespace

TEST_CASE("trainer_state.json: the run's flags read back exactly, and their settings line") {
  using model::training::settings_line;
  model::training::RunFlags f = run_flags();
  CHECK(settings_line(f) ==
        "data=/runs/the data.txt batch=2 ctx=16 optimizer=adamw lr=0.003 beta1=0.9 beta2=0.95 "
        "eps=1e-08 weight_decay=0.1 grad_clip=1 warmup=0 cosine=0 lr_min=0 seed=7 "
        "init=/runs/config.json model= sampling=random");
  // More digits than the settings line's 6: the flags keep them, and show the shortest text.
  f.lr = 1.2345678e-3f;
  f.val_data = "/runs/val.txt", f.eval_every = 2;
  const std::string text = with_flags(f);
  CHECK(text.find("\"lr\": 0.0012345678") != std::string::npos);
  CHECK(text.find("lr=0.00123457") != std::string::npos);
  const RunState s = parse_run_state(text, kFile);
  REQUIRE(s.flags);
  CHECK(*s.flags == f);
  CHECK(s.flags->lr == 1.2345678e-3f);
  CHECK(parse_run_state(model::training::run_state_json(s), kFile) == s);
  CHECK(model::training::run_flag_text(f, "lr") == "0.0012345678");
  CHECK(model::training::run_flag_text(f, "lr", false) == "0.00123457");
  // A state from before the flags were kept has none; its settings line gives the weights'.
  CHECK(!parse_run_state(with("", ""), kFile).flags);
  const std::optional<model::training::RunFlags> old =
      model::training::parse_settings_line(settings_line(run_flags()));
  REQUIRE(old);
  CHECK(old->data == "/runs/the data.txt");
  CHECK(old->lr == 3e-3f);
  CHECK(old->init == "/runs/config.json");
  CHECK(old->steps == 1000);  // not in the line: the command's default
  CHECK(!model::training::parse_settings_line("data=d.txt batch=2 ctx=16"));
  CHECK(!model::training::parse_settings_line(settings_line(run_flags()) + " extra=1"));
  CHECK(!model::training::parse_settings_line(""));
}

TEST_CASE("trainer_state.json: bad flags are refused, naming the flag") {
  const auto refused = [](const std::string& key, const std::string& value,
                          const std::string& message) {
    nlohmann::json j = nlohmann::json::parse(with_flags(run_flags()));
    if (value.empty())
      j["flags"].erase(key);
    else
      j["flags"][key] = nlohmann::json::parse(value);
    CAPTURE(key);
    CHECK_THROWS_WITH_AS(parse_run_state(j.dump(), kFile),
                         doctest::Contains((std::string(kFile) + ": " + message).c_str()),
                         std::runtime_error);
  };
  refused("lr", "", "flags.lr: missing");
  refused("lr", "\"0.003\"", "flags.lr: must be a finite 32-bit float, got string 0.003");
  refused("lr", "1e39", "flags.lr: must be a finite 32-bit float");
  refused("lr", "0", "flags.lr: 0 is outside (0, ");
  refused("beta2", "1.5", "flags.beta2: 1.5 is outside [0, 1]");
  refused("batch", "0", "flags.batch: must be at least 1");
  refused("batch", "4294967296", "flags.batch: 4294967296 is past 4294967295");
  refused("ctx", "-16", "flags.ctx: must be a whole number");
  refused("optimizer", "\"adam\"", "flags.optimizer: must be adamw or sgd, got adam");
  refused("cosine", "1", "flags.cosine: must be true or false, got 1");
  refused("data", "5", "flags.data: must be a string, got 5");
  refused("steps", "3", "flags.steps: 3 is before the state's step 4");
  refused("bogus", "1", "flags.bogus: is not a flag of a run");
  refused("model", "\"/runs/ckpt\"", "flags: must name exactly one of init and model");
  // The flags and the settings line say one thing.
  refused("seed", "8", "flags: do not match settings");
  nlohmann::json j = nlohmann::json::parse(with_flags(run_flags()));
  j["flags"] = "x";
  CHECK_THROWS_WITH_AS(parse_run_state(j.dump(), kFile),
                       doctest::Contains("flags: must be an object, got string x"),
                       std::runtime_error);
}

// Issue 41: the data order and the micro-batches shape the run; a run from before them (no
// "sampling" or "grad_accum" anywhere) is one of sequential windows and one micro-batch, its
// settings line the same text; random windows keep their generator's state in "rng_state".
TEST_CASE("trainer_state.json: sampling, grad_accum and the generator's state") {
  using model::training::settings_line;
  model::training::RunFlags f = run_flags();
  const std::string legacy_line =
      "data=/runs/the data.txt batch=2 ctx=16 optimizer=adamw lr=0.003 beta1=0.9 beta2=0.95 "
      "eps=1e-08 weight_decay=0.1 grad_clip=1 warmup=0 cosine=0 lr_min=0 seed=7 "
      "init=/runs/config.json model=";
  f.sampling = "sequential";
  CHECK(settings_line(f) == legacy_line);
  f.grad_accum = 4;
  CHECK(settings_line(f) == legacy_line + " grad_accum=4");
  f.sampling = "random";
  CHECK(settings_line(f) == legacy_line + " sampling=random grad_accum=4");
  // The line reads back, and an old line is sequential windows and one micro-batch.
  for (const std::string& line : {legacy_line, legacy_line + " grad_accum=4",
                                  legacy_line + " sampling=random",
                                  legacy_line + " sampling=random grad_accum=4"}) {
    const std::optional<model::training::RunFlags> back = model::training::parse_settings_line(line);
    REQUIRE_MESSAGE(back, line);
    CHECK(settings_line(*back) == line);
    CHECK(back->model.empty());
  }
  CHECK(model::training::parse_settings_line(legacy_line)->sampling == "sequential");
  CHECK(model::training::parse_settings_line(legacy_line)->grad_accum == 1);
  // Not the canonical line: a value that is the legacy one written out, keys out of order.
  CHECK(!model::training::parse_settings_line(legacy_line + " sampling=sequential"));
  CHECK(!model::training::parse_settings_line(legacy_line + " grad_accum=4 sampling=random"));
  CHECK(!model::training::parse_settings_line(legacy_line + " grad_accum=x"));

  // The state: flags and the generator's state round trip; 16 hexadecimal digits on disk.
  RunState s = parse_run_state(with("", ""), kFile);
  s.position = 0;
  s.settings = settings_line(f);
  s.flags = f;
  s.rng_state = 0x00ff00ff00ff00ffull;
  const std::string text = model::training::run_state_json(s);
  CHECK(text.find("\"rng_state\": \"00ff00ff00ff00ff\"") != std::string::npos);
  CHECK(parse_run_state(text, kFile) == s);
  s.rng_state = UINT64_MAX;
  CHECK(parse_run_state(model::training::run_state_json(s), kFile).rng_state == UINT64_MAX);

  // A state written before issue 41: flags without the two keys, the old line.
  nlohmann::json old = nlohmann::json::parse(with_flags(run_flags()));
  old["flags"].erase("sampling");
  old["flags"].erase("grad_accum");
  old["settings"] = legacy_line;
  const RunState o = parse_run_state(old.dump(), kFile);
  REQUIRE(o.flags);
  CHECK(o.flags->sampling == "sequential");
  CHECK(o.flags->grad_accum == 1);
  CHECK(!o.rng_state);
  // Without the old line it is not one: the flags and the settings then disagree.
  old["settings"] = settings_line(run_flags());
  CHECK_THROWS_WITH_AS(parse_run_state(old.dump(), kFile),
                       doctest::Contains("flags: do not match settings"), std::runtime_error);

  const auto refused = [&](const std::string& key, const std::string& value,
                           const std::string& message) {
    nlohmann::json j = nlohmann::json::parse(model::training::run_state_json(s));
    if (key.rfind("flags.", 0) == 0)
      j["flags"][key.substr(6)] = nlohmann::json::parse(value);
    else
      j[key] = nlohmann::json::parse(value);
    CAPTURE(key);
    CHECK_THROWS_WITH_AS(parse_run_state(j.dump(), kFile),
                         doctest::Contains((std::string(kFile) + ": " + message).c_str()),
                         std::runtime_error);
  };
  refused("rng_state", "5", "rng_state: must be 16 lowercase hexadecimal digits, got 5");
  refused("rng_state", "\"ff\"", "rng_state: must be 16 lowercase hexadecimal digits");
  refused("rng_state", "\"00FF00FF00FF00FF\"", "rng_state: must be 16 lowercase");
  refused("rng_state", "\"-0ff00ff00ff00ff\"", "rng_state: must be 16 lowercase");
  refused("rng_state", "\"00ff00ff00ff00ff0\"", "rng_state: must be 16 lowercase");
  refused("flags.sampling", "\"shuffled\"", "flags.sampling: must be random or sequential");
  refused("flags.grad_accum", "0", "flags.grad_accum: 0 is outside 1..65536");
  refused("flags.grad_accum", "65537", "flags.grad_accum: 65537 is outside 1..65536");
  refused("flags.grad_accum", "2", "flags: do not match settings");

  // The run that resumes it: random windows need the generator's state and position 0;
  // sequential ones have no generator.
  const model::training::RunBounds random{3300, 128, 8, true}, sequential{3300, 128, 8, false};
  CHECK_NOTHROW(check_run_state(s, random, kFile));
  CHECK_THROWS_WITH_AS(check_run_state(s, sequential, kFile),
                       doctest::Contains("rng_state: present in a run of sequential windows"),
                       std::runtime_error);
  RunState no_rng = s;
  no_rng.rng_state.reset();
  CHECK_THROWS_WITH_AS(check_run_state(no_rng, random, kFile),
                       doctest::Contains("rng_state: missing: a run of random windows keeps"),
                       std::runtime_error);
  CHECK_NOTHROW(check_run_state(no_rng, sequential, kFile));
  RunState moved = s;
  moved.position = 128;
  CHECK_THROWS_WITH_AS(check_run_state(moved, random, kFile),
                       doctest::Contains("position: 128 in a run of random windows, which keeps 0"),
                       std::runtime_error);
}

// Issue 41's --recompute: kept with the flags a resume may change (the weights are the same bits
// either way), so it is not in the settings line; a state from before it reads as false.
TEST_CASE("trainer_state.json: recompute, a flag a resume may change") {
  using model::training::settings_line;
  model::training::RunFlags f = run_flags();
  const std::string line = settings_line(f);
  f.recompute = true;
  CHECK(settings_line(f) == line);
  CHECK(!model::training::shapes_run("recompute"));
  CHECK(model::training::run_flag_keys().back() == "recompute");
  const std::string text = with_flags(f);
  CHECK(text.find("\"recompute\": true") != std::string::npos);
  const RunState s = parse_run_state(text, kFile);
  REQUIRE(s.flags);
  CHECK(s.flags->recompute);
  CHECK(parse_run_state(model::training::run_state_json(s), kFile) == s);
  nlohmann::json old = nlohmann::json::parse(text);
  old["flags"].erase("recompute");
  const RunState o = parse_run_state(old.dump(), kFile);
  REQUIRE(o.flags);
  CHECK(!o.flags->recompute);
  old["flags"]["recompute"] = 1;
  CHECK_THROWS_WITH_AS(parse_run_state(old.dump(), kFile),
                       doctest::Contains("flags.recompute: must be true or false, got 1"),
                       std::runtime_error);
}
