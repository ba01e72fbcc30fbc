// Training's checkpoints: a Hugging Face-layout folder that generate, compare and perplexity read
// as it is, plus what --resume needs to go on exactly where a run stopped.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string_view>

#include "model/training/parameters.h"
#include "model/training/run_state.h"

namespace model::training {

// Called before each file operation a save makes ("mkdir", "write", "sync", "rename",
// "remove"), with the path it acts on. Tests kill the process there to prove that a kill at any
// operation leaves a checkpoint --resume finds (gpt2vk train's GPT2VK_TRAIN_KILL_AT_FILE_OP).
using FileOpHook = std::function<void(std::string_view op, const std::filesystem::path& path)>;

// Writes dir/config.json, dir/model.safetensors (F32, the step in its metadata; a decoder's
// under the canonical names, an encoder-decoder's in MarianMTModel's, T5 refused), the tokenizer
// files of `tokenizer_dir` the config needs (GPT-2's vocab.json and merges.txt; Marian's
// source.spm, target.spm and vocab.json), and with a state dir/optimizer.safetensors (AdamW's m
// and v, canonical names) and dir/trainer_state.json.
//
// The files change together or not at all, for a kill at any point. They are written into
// dir/.partial-checkpoint/ and flushed to disk (fsync), and that folder is renamed to
// dir/.complete-checkpoint/: that one rename is the commit. Then each file is renamed over its
// old one in dir, the weights last, and the emptied folder removed. Until the commit, dir holds
// the previous checkpoint whole (a partial folder is thrown away by the next save); after it,
// the new files are in dir or still in the complete folder, and finish_save() moves the rest
// in. dir stays the folder generate, compare and perplexity read, each of its files whole at
// every moment. Creates dir if needed; throws naming the file.
void save_checkpoint(const std::filesystem::path& dir, const Parameters& params,
                     const std::filesystem::path& tokenizer_dir, const RunState* state = nullptr,
                     const Parameters* m = nullptr, const Parameters* v = nullptr,
                     const FileOpHook& hook = {});

// Finishes a save that a kill stopped after its commit: moves the files left in
// dir/.complete-checkpoint/ into dir. Returns whether there was one; writes nothing otherwise
// (dir may be read-only). Idempotent, so a kill inside it is finished by the next call.
bool finish_save(const std::filesystem::path& dir, const FileOpHook& hook = {});

// The run state of the training checkpoint in dir, after finish_save(dir): what --resume reads
// first, for the run's flags. Throws "<dir> is not a training checkpoint: it has no
// trainer_state.json" (or no optimizer.safetensors), or what parse_run_state refuses.
RunState read_run_state(const std::filesystem::path& dir, const FileOpHook& hook = {});

// Whether a save into dir would replace a checkpoint: nullopt where dir holds none (no folder,
// an empty one, none of a checkpoint's files, in dir or in a save's complete folder), else its
// step, or 0 where it has no trainer_state.json that reads (a model folder). Writes nothing.
std::optional<uint64_t> checkpoint_in(const std::filesystem::path& dir);

// Reads a checkpoint's run state and moments for --resume, after finish_save(dir): throws naming
// what is missing or does not match (another model's shape, a state whose step differs from
// the weights', any field parse_run_state refuses).
struct Resumed {
  RunState state;
  Parameters params, m, v;
};
Resumed load_run(const std::filesystem::path& dir, const FileOpHook& hook = {});

}  // namespace model::training
