// Training's checkpoints: a Hugging Face-layout folder that generate, compare and perplexity read
// as it is, plus what --resume needs to go on exactly where a run stopped.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/training/parameters.h"

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
};

// Writes dir/config.json, dir/model.safetensors (F32, the step in its metadata), the tokenizer
// files of `tokenizer_dir` the config needs (GPT-2's vocab.json and merges.txt), and with a
// state dir/optimizer.safetensors (AdamW's m and v) and dir/trainer_state.json. Each file is
// written under a temporary name, flushed, and renamed over the old one, model.safetensors
// last: a crash or a full disk leaves the previous files whole, and a resume checks that the
// state and the weights name the same step. Creates dir if needed; throws naming the file.
void save_checkpoint(const std::filesystem::path& dir, const Parameters& params,
                     const std::filesystem::path& tokenizer_dir, const RunState* state = nullptr,
                     const Parameters* m = nullptr, const Parameters* v = nullptr);

// Reads a checkpoint's run state and moments for --resume: throws naming what is missing or
// does not match (another model's shape, a state whose step differs from the weights').
struct Resumed {
  RunState state;
  Parameters params, m, v;
};
Resumed load_run(const std::filesystem::path& dir);

}  // namespace model::training
