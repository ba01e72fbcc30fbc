// gpt2vk train on an encoder-decoder (Marian): its data are pairs of a source and a target
// (model/training/pairs.h), each side tokenized by the folder's own SentencePiece model; what
// the decoder's run does with tokens, the encoder-decoder's does with pairs.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/formats/config.h"
#include "model/text/sentencepiece.h"
#include "model/training/gpu_trainer.h"
#include "model/training/pairs.h"
#include "model/training/run_state.h"

namespace app {

// Refuses the flags an encoder-decoder's run does not take yet, each by name: --recompute,
// --sampling sequential, and --ctx (its lengths are its pairs').
void check_pairs_run(const model::training::RunFlags& run,
                     const std::function<bool(const std::string&)>& given);

// The run's pairs through the source.spm and target.spm of `dir`: --data's, and --val-data's
// (none where `val_file` is empty; at least B pairs for an evaluation). Every step lays its pairs
// out alike (`layout`): padded to the longest source and target of both files, which must be
// within the model's context; pairs of different lengths need the config's pad_token_id.
struct RunPairs {
  model::training::Pairs train, val;
  model::training::PairLayout layout;
  std::unique_ptr<model::SentencePieceTokenizer> source, target;  // the folder's
};
RunPairs load_pairs(const std::filesystem::path& dir, const model::Config& c,
                    const std::string& file, const std::string& val_file, uint32_t B);

// Every id of the pairs, the sources then the targets, then each pair's two lengths: what a run
// hashes as its data.
std::vector<int32_t> pair_ids(const model::training::Pairs& pairs);

// The mean loss over the targets of the pairs in whole batches of the trainer's B (a last part
// batch left out), laid out as `layout`; `rows` gets how many pairs that was.
double evaluate_pairs(model::training::GpuTrainer& trainer, const model::training::Pairs& pairs,
                      const model::training::PairLayout& layout, uint64_t& rows);

// --sample-every's source, padded to the run's S: --sample-prompt's text through the source
// tokenizer, at most S ids (a clear error otherwise), or with none the first training pair's.
std::vector<int32_t> pair_sample_source(const RunPairs& pairs, const std::string& prompt);

// The source translated greedily by the trainer's weights as they are (target_logits, the same
// run prints the same samples): up to n target ids, at most the run's T, ending at the model's
// end-of-text (not shown); the text of those ids.
std::string sample_pair(model::training::GpuTrainer& trainer, const RunPairs& pairs,
                        const model::Config& c, std::span<const int32_t> source, uint32_t n);

}  // namespace app
