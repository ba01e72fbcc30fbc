#include "model/training/run_state.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "model/formats/json_util.h"

namespace model::training {
namespace {

using json = nlohmann::json;
using Curve = std::vector<std::pair<uint64_t, double>>;

// A value for a message: scalars as written, containers by kind (never dumped: they may be deep).
std::string describe(const json& v) {
  if (v.is_string()) return "string " + json_util::show(v.get_ref<const std::string&>(), 40);
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return v.dump();
}

[[noreturn]] void fail(const std::string& file, std::string_view field,
                       const std::string& problem) {
  throw std::runtime_error(file + ": " + std::string(field) + ": " + problem);
}

// A whole number in [0, 2^64). nlohmann's get<uint64_t> turns -1 into 2^64 - 1 and 4.5 into 4
// without a word (a position of -1 once trained on): the JSON type is checked first.
uint64_t whole(const json& v, const std::string& file, std::string_view field) {
  if (!v.is_number_unsigned())
    fail(file, field, "must be a whole number from 0 to 2^64 - 1, got " + describe(v));
  return v.get<uint64_t>();
}

// [[step, loss], ...]: steps increasing within 1..last, losses finite.
Curve curve(const json& v, uint64_t last, const std::string& file, std::string_view field) {
  if (!v.is_array())
    fail(file, field, "must be an array of [step, loss] pairs, got " + describe(v));
  Curve out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); i++) {
    const std::string at = std::string(field) + "[" + std::to_string(i) + "]";
    const json& e = v[i];
    if (!e.is_array() || e.size() != 2)
      fail(file, at, "must be a [step, loss] pair, got " + describe(e));
    const uint64_t step = whole(e[0], file, at);
    if (step == 0 || step > last)
      fail(file, at, "step " + std::to_string(step) + " is outside 1.." + std::to_string(last));
    if (!out.empty() && step <= out.back().first)
      fail(file, at,
           "step " + std::to_string(step) + " does not follow step " +
               std::to_string(out.back().first));
    if (!e[1].is_number() || !std::isfinite(e[1].get<double>()))
      fail(file, at, "the loss must be a finite number, got " + describe(e[1]));
    out.emplace_back(step, e[1].get<double>());
  }
  return out;
}

}  // namespace

std::string run_state_json(const RunState& s) {
  const json j = {{"step", s.step},
                  {"position", s.position},
                  {"settings", s.settings},
                  {"train_loss", s.train_loss},
                  {"val_loss", s.val_loss}};
  return j.dump(2) + "\n";
}

RunState parse_run_state(std::string_view text, const std::string& file) {
  const json j = json_util::parse(text, file);
  if (!j.is_object())
    throw std::runtime_error(file + ": a JSON " + std::string(j.type_name()) + ", not an object");
  for (const auto& [key, value] : j.items())
    if (key != "step" && key != "position" && key != "settings" && key != "train_loss" &&
        key != "val_loss")
      fail(file, json_util::show(key, 40), "is not a field of a run state");
  const auto field = [&](const char* key) -> const json& {
    const auto it = j.find(key);
    if (it == j.end()) fail(file, key, "missing");
    return *it;
  };
  RunState s;
  s.step = whole(field("step"), file, "step");
  if (s.step == 0) fail(file, "step", "must be at least 1 (a checkpoint is saved after a step)");
  s.position = whole(field("position"), file, "position");
  const json& settings = field("settings");
  if (!settings.is_string()) fail(file, "settings", "must be a string, got " + describe(settings));
  s.settings = settings.get<std::string>();
  // Checkpoints from before the losses were kept have no curves.
  if (j.contains("train_loss")) s.train_loss = curve(j["train_loss"], s.step, file, "train_loss");
  if (j.contains("val_loss")) s.val_loss = curve(j["val_loss"], s.step, file, "val_loss");
  return s;
}

void check_run_state(const RunState& s, const RunBounds& b, const std::string& file) {
  if (s.position >= b.tokens)
    fail(file, "position",
         std::to_string(s.position) + " is past the data's last token (it holds " +
             std::to_string(b.tokens) + "; was the data changed?)");
  if (b.batch_tokens == 0 || s.position % b.batch_tokens != 0)
    fail(file, "position",
         std::to_string(s.position) + " is not a multiple of the " +
             std::to_string(b.batch_tokens) +
             " tokens a step takes (B x T), where every step starts");
  if (s.step > b.steps)
    fail(file, "step",
         std::to_string(s.step) + " is past --steps " + std::to_string(b.steps) +
             " (give --steps " + std::to_string(s.step) + " or more)");
}

}  // namespace model::training
