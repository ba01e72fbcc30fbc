#include "model/training/run_state.h"

#include <algorithm>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <variant>

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

// The flags, one row each, in the settings line's order: the first kShaping shape the weights.
using Member = std::variant<std::string RunFlags::*, uint32_t RunFlags::*, uint64_t RunFlags::*,
                            float RunFlags::*, bool RunFlags::*>;
struct Field {
  std::string_view key;
  Member member;
};
const Field kFields[] = {
    {"data", &RunFlags::data},         {"batch", &RunFlags::batch},
    {"ctx", &RunFlags::ctx},           {"optimizer", &RunFlags::optimizer},
    {"lr", &RunFlags::lr},             {"beta1", &RunFlags::beta1},
    {"beta2", &RunFlags::beta2},       {"eps", &RunFlags::eps},
    {"weight_decay", &RunFlags::weight_decay}, {"grad_clip", &RunFlags::grad_clip},
    {"warmup", &RunFlags::warmup},     {"cosine", &RunFlags::cosine},
    {"lr_min", &RunFlags::lr_min},     {"seed", &RunFlags::seed},
    {"init", &RunFlags::init},         {"model", &RunFlags::model},
    {"sampling", &RunFlags::sampling}, {"grad_accum", &RunFlags::grad_accum},
    {"steps", &RunFlags::steps},       {"val_data", &RunFlags::val_data},
    {"eval_every", &RunFlags::eval_every}, {"save_every", &RunFlags::save_every},
    {"recompute", &RunFlags::recompute},
};
constexpr size_t kShaping = 18;
// The first kLegacy shape every run's settings line; the rest (issue 41's) appear in it only
// where they differ from their value in a run from before them.
constexpr size_t kLegacy = 16;
const RunFlags& legacy() {
  static const RunFlags f = [] {
    RunFlags r;
    r.sampling = "sequential";
    r.grad_accum = 1;
    return r;
  }();
  return f;
}
bool in_line(const RunFlags& f, size_t i) {
  return i < kLegacy ||
         run_flag_text(f, kFields[i].key, false) != run_flag_text(legacy(), kFields[i].key, false);
}

// rng_state's text: 16 lowercase hexadecimal digits.
std::string hex16(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; i--, v >>= 4) out[size_t(i)] = digits[v & 15];
  return out;
}

const Field& field_of(std::string_view key) {
  for (const Field& f : kFields)
    if (f.key == key) return f;
  throw std::invalid_argument("no run flag " + std::string(key));
}

// The shortest text that reads back as the same float ("0.003", not 0.0030000000260770321).
std::string shortest(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// A float as a JSON number that reads back as it: the double its shortest text names (so the
// file shows 0.003), unless that double rounds to another float.
double json_float(float v) {
  const double d = std::strtod(shortest(v).c_str(), nullptr);
  return static_cast<float>(d) == v ? d : double{v};
}

// A settings line's value into a flag: false where the text is not one the line writes.
bool read_value(RunFlags& f, const Member& member, std::string_view text) {
  return std::visit(
      [&](auto m) {
        using T = std::remove_cvref_t<decltype(f.*m)>;
        if constexpr (std::is_same_v<T, std::string>) {
          f.*m = std::string(text);
          return true;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (text != "0" && text != "1") return false;
          f.*m = text == "1";
          return true;
        } else {
          T v{};
          const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
          if (r.ec != std::errc() || r.ptr != text.data() + text.size()) return false;
          if constexpr (std::is_same_v<T, float>)
            if (!std::isfinite(v)) return false;
          f.*m = v;
          return true;
        }
      },
      member);
}

json flags_json(const RunFlags& f) {
  json j = json::object();
  for (const Field& field : kFields)
    std::visit(
        [&](auto m) {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(f.*m)>, float>)
            j[std::string(field.key)] = json_float(f.*m);
          else
            j[std::string(field.key)] = f.*m;
        },
        field.member);
  return j;
}

// "flags": every key of kFields with its type, and what the command would accept of it.
RunFlags parse_flags(const json& j, uint64_t step, const std::string& settings,
                     const std::string& file) {
  if (!j.is_object()) fail(file, "flags", "must be an object, got " + describe(j));
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const Field& f : kFields) known = known || f.key == key;
    if (!known) fail(file, "flags." + json_util::show(key, 40), "is not a flag of a run");
  }
  // A state from before issue 41 has neither "sampling" nor "grad_accum": its run's are
  // sequential windows and one micro-batch; nor "recompute": its run kept every activation.
  RunFlags f = legacy();
  for (const Field& field : kFields) {
    const std::string at = "flags." + std::string(field.key);
    const auto it = j.find(std::string(field.key));
    if (it == j.end() &&
        (field.key == "sampling" || field.key == "grad_accum" || field.key == "recompute"))
      continue;
    if (it == j.end()) fail(file, at, "missing");
    const json& v = *it;
    std::visit(
        [&](auto m) {
          using T = std::remove_cvref_t<decltype(f.*m)>;
          if constexpr (std::is_same_v<T, std::string>) {
            if (!v.is_string()) fail(file, at, "must be a string, got " + describe(v));
            f.*m = v.get<std::string>();
          } else if constexpr (std::is_same_v<T, bool>) {
            if (!v.is_boolean()) fail(file, at, "must be true or false, got " + describe(v));
            f.*m = v.get<bool>();
          } else if constexpr (std::is_same_v<T, float>) {
            if (!v.is_number() || !std::isfinite(v.get<double>()) ||
                std::fabs(v.get<double>()) > double{FLT_MAX})
              fail(file, at, "must be a finite 32-bit float, got " + describe(v));
            f.*m = static_cast<float>(v.get<double>());
          } else {
            const uint64_t n = whole(v, file, at);
            if (n > std::numeric_limits<T>::max())
              fail(file, at, std::to_string(n) + " is past " +
                                 std::to_string(std::numeric_limits<T>::max()));
            f.*m = static_cast<T>(n);
          }
        },
        field.member);
  }
  // What the command's own checks would refuse on its command line.
  const auto range = [&](const char* key, float v, float lo, float hi, bool open_lo) {
    if (v < lo || v > hi || (open_lo && v == lo))
      fail(file, std::string("flags.") + key,
           shortest(v) + " is outside " + (open_lo ? "(" : "[") + shortest(lo) + ", " +
               shortest(hi) + "]");
  };
  if (f.batch == 0) fail(file, "flags.batch", "must be at least 1");
  if (f.ctx == 0) fail(file, "flags.ctx", "must be at least 1");
  if (f.optimizer != "adamw" && f.optimizer != "sgd")
    fail(file, "flags.optimizer", "must be adamw or sgd, got " + json_util::show(f.optimizer, 40));
  if (f.sampling != "random" && f.sampling != "sequential")
    fail(file, "flags.sampling",
         "must be random or sequential, got " + json_util::show(f.sampling, 40));
  if (f.grad_accum == 0 || f.grad_accum > kMaxGradAccum)
    fail(file, "flags.grad_accum",
         std::to_string(f.grad_accum) + " is outside 1.." + std::to_string(kMaxGradAccum));
  range("lr", f.lr, 0, FLT_MAX, true);
  range("beta1", f.beta1, 0, 1, false);
  range("beta2", f.beta2, 0, 1, false);
  range("eps", f.eps, 0, FLT_MAX, true);
  range("weight_decay", f.weight_decay, 0, 1e6f, false);
  range("grad_clip", f.grad_clip, 0, 1e30f, false);
  range("lr_min", f.lr_min, 0, 1e30f, false);
  if (f.data.empty()) fail(file, "flags.data", "must name the training text");
  if (f.init.empty() == f.model.empty())
    fail(file, "flags", "must name exactly one of init and model (where the run began)");
  if (f.steps < step)
    fail(file, "flags.steps",
         std::to_string(f.steps) + " is before the state's step " + std::to_string(step));
  if (settings_line(f) != settings)
    fail(file, "flags", "do not match settings (" + json_util::show(settings_line(f), 80) + ")");
  return f;
}

}  // namespace

const std::vector<std::string_view>& run_flag_keys() {
  static const std::vector<std::string_view> keys = [] {
    std::vector<std::string_view> k;
    for (const Field& f : kFields) k.push_back(f.key);
    return k;
  }();
  return keys;
}

bool shapes_run(std::string_view key) { return &field_of(key) < kFields + kShaping; }

std::string run_flag_text(const RunFlags& f, std::string_view key, bool exact) {
  return std::visit(
      [&](auto m) -> std::string {
        using T = std::remove_cvref_t<decltype(f.*m)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return f.*m;
        } else if constexpr (std::is_same_v<T, float>) {
          if (exact) return shortest(f.*m);
          std::ostringstream s;  // as the settings line has always printed them
          s << f.*m;
          return s.str();
        } else if constexpr (std::is_same_v<T, bool>) {
          return exact ? (f.*m ? "true" : "false") : (f.*m ? "1" : "0");
        } else {
          return std::to_string(f.*m);
        }
      },
      field_of(key).member);
}

void copy_run_flag(RunFlags& to, const RunFlags& from, std::string_view key) {
  std::visit([&](auto m) { to.*m = from.*m; }, field_of(key).member);
}

std::string settings_line(const RunFlags& f) {
  std::string line;
  // Appended piece by piece: `"literal" + std::string&&` makes GCC 12 at -O3 warn of an
  // overlapping memcpy that cannot happen (-Wrestrict, GCC bug 105329).
  for (size_t i = 0; i < kShaping; i++) {
    if (!in_line(f, i)) continue;
    if (i) line += ' ';
    line.append(kFields[i].key).append("=").append(run_flag_text(f, kFields[i].key, false));
  }
  return line;
}

std::optional<RunFlags> parse_settings_line(std::string_view line) {
  RunFlags f = legacy();
  size_t at = 0;
  const auto key_of = [](size_t i) {
    std::string key = i ? " " : "";
    return key.append(kFields[i].key).append("=");
  };
  for (size_t i = 0; i < kShaping; i++) {
    const std::string key = key_of(i);
    if (line.compare(at, key.size(), key) != 0) {
      if (i >= kLegacy) continue;  // at its legacy value
      return std::nullopt;
    }
    at += key.size();
    // A path may hold spaces: the value runs to the next key there (the last, to the end).
    size_t end = line.size();
    if (i + 1 < kLegacy) {
      end = line.find(key_of(i + 1), at);
      if (end == std::string_view::npos) return std::nullopt;
    } else {
      for (size_t k = std::max(i + 1, kLegacy); k < kShaping; k++)
        end = std::min(end, line.find(key_of(k), at));
    }
    if (!read_value(f, kFields[i].member, line.substr(at, end - at))) return std::nullopt;
    at = end;
  }
  if (at != line.size()) return std::nullopt;
  // A run names its data and began from one of a config and a checkpoint.
  if (f.data.empty() || f.init.empty() == f.model.empty() || settings_line(f) != line)
    return std::nullopt;
  if ((f.sampling != "random" && f.sampling != "sequential") || f.grad_accum == 0 ||
      f.grad_accum > kMaxGradAccum)
    return std::nullopt;
  return f;
}

std::string run_state_json(const RunState& s) {
  json j = {{"step", s.step},
            {"position", s.position},
            {"settings", s.settings},
            {"train_loss", s.train_loss},
            {"val_loss", s.val_loss}};
  if (s.rng_state) j["rng_state"] = hex16(*s.rng_state);
  if (s.flags) j["flags"] = flags_json(*s.flags);
  return j.dump(2) + "\n";
}

RunState parse_run_state(std::string_view text, const std::string& file) {
  const json j = json_util::parse(text, file);
  if (!j.is_object())
    throw std::runtime_error(file + ": a JSON " + std::string(j.type_name()) + ", not an object");
  for (const auto& [key, value] : j.items())
    if (key != "step" && key != "position" && key != "settings" && key != "train_loss" &&
        key != "val_loss" && key != "flags" && key != "rng_state")
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
  if (j.contains("rng_state")) {
    const json& v = j["rng_state"];
    const bool ok = v.is_string() && v.get_ref<const std::string&>().size() == 16 &&
                    v.get_ref<const std::string&>().find_first_not_of("0123456789abcdef") ==
                        std::string::npos;
    if (!ok) fail(file, "rng_state", "must be 16 lowercase hexadecimal digits, got " + describe(v));
    s.rng_state = std::strtoull(v.get_ref<const std::string&>().c_str(), nullptr, 16);
  }
  const json& settings = field("settings");
  if (!settings.is_string()) fail(file, "settings", "must be a string, got " + describe(settings));
  s.settings = settings.get<std::string>();
  // Checkpoints from before the losses were kept have no curves.
  if (j.contains("train_loss")) s.train_loss = curve(j["train_loss"], s.step, file, "train_loss");
  if (j.contains("val_loss")) s.val_loss = curve(j["val_loss"], s.step, file, "val_loss");
  // States from before the flags were kept have only the settings line.
  if (j.contains("flags")) s.flags = parse_flags(j["flags"], s.step, s.settings, file);
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
  if (b.random && !s.rng_state)
    fail(file, "rng_state",
         "missing: a run of random windows keeps its generator's state there");
  if (!b.random && s.rng_state)
    fail(file, "rng_state", "present in a run of sequential windows, which has none");
  if (b.random && s.position != 0)
    fail(file, "position",
         std::to_string(s.position) + " in a run of random windows, which keeps 0 there");
  if (s.step > b.steps)
    fail(file, "step",
         std::to_string(s.step) + " is past --steps " + std::to_string(b.steps) +
             " (give --steps " + std::to_string(s.step) + " or more)");
}

}  // namespace model::training
