// trainer_state.json: where a run stands, read back by --resume. The file is untrusted input (a
// disk, a hand edit, a kill can leave anything there), so it is read field by field and then
// checked against the run that resumes it; plain C++ without Vulkan, so fuzz/ can feed it bytes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace model::training {

// Where a run stands: the steps made, the data position of the next, and the flags that shaped
// it (a resume must be given the same ones).
struct RunState {
  uint64_t step = 0;
  uint64_t position = 0;
  std::string settings;  // a canonical description of the run's flags, compared on resume
  // (step, loss) of every step so far, and of every evaluation: a resumed run's loss.svg draws
  // the whole run. Checkpoints written before this was kept have none.
  std::vector<std::pair<uint64_t, double>> train_loss, val_loss;

  bool operator==(const RunState&) const = default;
};

// The file's text: {"position", "settings", "step", "train_loss", "val_loss"}, indented by 2.
std::string run_state_json(const RunState& state);

// Reads the text of `file` (named in errors only). Every problem throws std::runtime_error
// "<file>: <field>: <problem>" on one line: invalid JSON, a missing or unknown field, a step
// or position that is not a whole number in [0, 2^64) (-1 is not 2^64 - 1), a step of 0 (saves
// follow a step), a loss curve whose steps are not increasing within 1..step or whose losses
// are not finite. parse_run_state(run_state_json(s)) == s for any state it accepts.
RunState parse_run_state(std::string_view text, const std::string& file);

// What the resuming run has: its data's tokens, the tokens a step consumes (B * T) and the
// steps it is asked to reach.
struct RunBounds {
  uint64_t tokens = 0;
  uint64_t batch_tokens = 1;
  uint64_t steps = 0;
};
// Throws "<file>: <field>: <problem>" where the state does not fit the run: a position that is
// not before the data's last token or not a multiple of B * T (the data order only ever stops
// there), a step past the steps asked for.
void check_run_state(const RunState& state, const RunBounds& bounds, const std::string& file);

}  // namespace model::training
