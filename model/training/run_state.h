// trainer_state.json: where a run stands, read back by --resume. The file is untrusted input (a
// disk, a hand edit, a kill can leave anything there), so it is read field by field and then
// checked against the run that resumes it; plain C++ without Vulkan, so fuzz/ can feed it bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace model::training {

// The flags of `gpt2vk train` a run was given, paths absolute: what `--resume DIR` alone goes
// on with. The defaults are the command's.
struct RunFlags {
  // These shape the weights: a resume given one of them must give the recorded value.
  std::string data;  // the training text
  uint32_t batch = 4, ctx = 64;  // B sequences of T tokens a step
  std::string optimizer = "adamw";  // adamw | sgd
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  float grad_clip = 1.0f;  // 0: no clipping
  uint64_t warmup = 0;
  bool cosine = false;
  float lr_min = 0.0f;
  uint64_t seed = 1;
  std::string init, model;  // where the run began: a config.json or a checkpoint (one of them)
  // Issue 41's, after the first 16 in the settings line, and there only where they are not
  // sequential and 1: a run from before them reads as one with those.
  std::string sampling = "random";  // random | sequential: the data order (schedule.h)
  uint32_t grad_accum = 1;  // micro-batches of B sequences per optimizer step
  // These a resume may change: the total steps (to extend the run), validation, saves, and
  // whether the backward recomputes the blocks' activations (the same bits either way).
  uint64_t steps = 1000;
  std::string val_data;
  uint64_t eval_every = 0, save_every = 0;
  bool recompute = false;  // --recompute; a state from before it has none: false

  bool operator==(const RunFlags&) const = default;
};

// --grad-accum's largest value.
constexpr uint32_t kMaxGradAccum = 65536;

// The flags' keys in the settings line's order, those that shape the weights first ("data",
// "batch", ..., "model", "sampling", "grad_accum"), then "steps", "val_data", "eval_every",
// "save_every", "recompute".
const std::vector<std::string_view>& run_flag_keys();
// Whether the flag of `key` shapes the weights (a resume must not change it).
bool shapes_run(std::string_view key);
// A flag's value as text: numbers in full ("0.003", the shortest that reads back as the same
// float) or, where !exact, as the settings line prints them (6 significant digits).
std::string run_flag_text(const RunFlags& flags, std::string_view key, bool exact = true);
// Sets `to`'s flag of `key` to `from`'s.
void copy_run_flag(RunFlags& to, const RunFlags& from, std::string_view key);

// The canonical one-line description of the flags that shape the weights, which every state
// has kept since the first: "data=/abs/data.txt batch=4 ctx=64 optimizer=adamw lr=0.0003 ...
// init=/abs/config.json model=", then " sampling=random" and " grad_accum=N" where they are not
// sequential and 1 (so the line of a run from before them is the line of its flags today).
std::string settings_line(const RunFlags& flags);
// The flags read back from a settings line, for states written before "flags" was kept; the
// other flags keep their defaults, and numbers have the line's 6 significant digits. nullopt
// where the line is not one settings_line() writes.
std::optional<RunFlags> parse_settings_line(std::string_view line);

// Where a run stands: the steps made, where the next one's data comes from (the position of
// sequential windows, the generator's state of random ones), and the flags that shaped it (a
// resume must be given the same ones).
struct RunState {
  uint64_t step = 0;
  uint64_t position = 0;  // sequential windows; 0 in a run of random ones
  std::string settings;  // settings_line() of the run's flags, compared on resume
  // The run's flags, exactly; states written before they were kept have only the settings line.
  std::optional<RunFlags> flags;
  // (step, loss) of every step so far, and of every evaluation: a resumed run's loss.svg draws
  // the whole run. Checkpoints written before this was kept have none.
  std::vector<std::pair<uint64_t, double>> train_loss, val_loss;
  // Random windows: splitmix64's state before the next step (schedule.h RandomWindows).
  std::optional<uint64_t> rng_state;

  bool operator==(const RunState&) const = default;
};

// The file's text: {"flags", "position", "rng_state", "settings", "step", "train_loss",
// "val_loss"}, indented by 2; "flags" an object of run_flag_keys(), where the state has them;
// "rng_state" 16 lowercase hexadecimal digits, where the state has one.
std::string run_state_json(const RunState& state);

// Reads the text of `file` (named in errors only). Every problem throws std::runtime_error
// "<file>: <field>: <problem>" on one line: invalid JSON, a missing or unknown field, a step
// or position that is not a whole number in [0, 2^64) (-1 is not 2^64 - 1), a step of 0 (saves
// follow a step), a loss curve whose steps are not increasing within 1..step or whose losses
// are not finite; in "flags", a missing or unknown key, a value of another type or outside what
// the command accepts, a steps before the state's step, or flags whose settings_line() is not
// "settings" ("sampling" and "grad_accum" may be missing: sequential and 1, as before them;
// "recompute" too: false); an
// "rng_state" that is not 16 lowercase hexadecimal digits. parse_run_state(run_state_json(s))
// == s for any state it accepts.
RunState parse_run_state(std::string_view text, const std::string& file);

// What the resuming run has: its data's tokens, the tokens a step consumes (N * B * T, N the
// micro-batches), the steps it is asked to reach, and its data order.
struct RunBounds {
  uint64_t tokens = 0;
  uint64_t batch_tokens = 1;
  uint64_t steps = 0;
  bool random = false;  // --sampling random: the state must have an rng_state, and position 0
};
// Throws "<file>: <field>: <problem>" where the state does not fit the run: a position that is
// not before the data's last token or not a multiple of N * B * T (the data order only ever
// stops there), a step past the steps asked for, an rng_state missing from a run of random
// windows or present in one of sequential ones, a position other than 0 in a random one.
void check_run_state(const RunState& state, const RunBounds& bounds, const std::string& file);

}  // namespace model::training
