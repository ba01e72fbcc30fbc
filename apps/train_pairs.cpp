#include "apps/train_pairs.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "apps/commands.h"
#include "apps/seq2seq_session.h"
#include "model/ops/types.h"
#include "model/text/sentencepiece.h"

namespace app {

void check_pairs_run(const model::training::RunFlags& run,
                     const std::function<bool(const std::string&)>& given) {
  const std::string what = "an encoder-decoder (Marian) ";
  if (run.recompute)
    throw std::runtime_error("--recompute: " + what +
                             "keeps every activation of its step (no "
                             "recomputation yet)");
  if (run.sampling != "random")
    throw std::runtime_error("--sampling " + run.sampling + ": " + what +
                             "draws its pairs at random");
  if (given("--ctx"))
    throw std::runtime_error("--ctx: " + what +
                             "takes its lengths from its pairs (the longest "
                             "source and target of --data and --val-data)");
}

RunPairs load_pairs(const std::filesystem::path& dir, const model::Config& c,
                    const std::string& file, const std::string& val_file, uint32_t B) {
  if (c.tokenizer.kind != model::TokenizerKind::MarianSpm)
    throw std::runtime_error(dir.string() +
                             ": training an encoder-decoder takes Marian's "
                             "tokenizer files (source.spm, target.spm, vocab.json)");
  RunPairs r;
  r.source = model::load_sentencepiece(dir, spm_flavor(c), model::SpmSide::Source);
  r.target = model::load_sentencepiece(dir, spm_flavor(c), model::SpmSide::Target);
  if (!c.decoder_start_token_id)
    throw std::runtime_error(dir.string() + "/config.json: no decoder_start_token_id");
  const auto read = [&](const std::string& f) {
    return model::training::read_pairs(
        f, read_file(f), [&](std::string_view t) { return r.source->encode(t); },
        [&](std::string_view t) { return r.target->encode(t); }, c.pad_token_id);
  };
  r.train = read(file);
  if (!val_file.empty()) r.val = read(val_file);
  // One layout for every step and evaluation: the longest of both files.
  model::training::PairLayout& l = r.layout;
  l = {std::max(r.train.S, r.val.S), std::max(r.train.T, r.val.T), *c.decoder_start_token_id,
       c.pad_token_id};
  for (const auto& [n, side] : {std::pair{l.S, "source"}, {l.T, "target"}})
    if (n > c.n_ctx)
      throw std::runtime_error("a " + std::string(side) + " of " + std::to_string(n) +
                               " tokens (in " +
                               (val_file.empty() ? file : file + " or " + val_file) +
                               ") is past the model's context of " + std::to_string(c.n_ctx));
  if (!val_file.empty() && r.val.size() < B)
    throw std::runtime_error(val_file + ": " + std::to_string(r.val.size()) +
                             " pairs; an evaluation takes B=" + std::to_string(B));
  const auto uniform = [&](const model::training::Pairs& p) {
    for (uint64_t i = 0; i < p.size(); i++)
      if (p.source(i).size() != l.S || p.target(i).size() != l.T) return false;
    return true;
  };
  if (!c.pad_token_id && !(uniform(r.train) && uniform(r.val)))
    throw std::runtime_error(dir.string() +
                             "/config.json: no pad_token_id, which pairs of different lengths "
                             "need to share a step");
  return r;
}

std::vector<int32_t> pair_ids(const model::training::Pairs& pairs) {
  std::vector<int32_t> ids = pairs.sources;
  ids.insert(ids.end(), pairs.targets.begin(), pairs.targets.end());
  // Each pair's lengths too: the same ids split into other pairs are other data.
  for (uint64_t i = 0; i < pairs.size(); i++) {
    ids.push_back(static_cast<int32_t>(pairs.source(i).size()));
    ids.push_back(static_cast<int32_t>(pairs.target(i).size()));
  }
  return ids;
}

double evaluate_pairs(model::training::GpuTrainer& trainer, const model::training::Pairs& pairs,
                      const model::training::PairLayout& layout, uint64_t& rows) {
  const uint32_t B = trainer.batch();
  std::vector<uint64_t> batch(B);
  std::vector<int32_t> sources, inputs, targets;
  double loss = 0, n = 0;  // the sum of the batches' losses weighted by their targets; those
  rows = 0;
  for (uint64_t r0 = 0; r0 + B <= pairs.size(); r0 += B) {
    std::iota(batch.begin(), batch.end(), r0);
    model::training::gather_pairs(pairs, batch, layout, sources, inputs, targets);
    const auto real = static_cast<double>(model::training::real_targets(targets));
    loss += trainer.evaluate(inputs, targets, sources) * real;
    n += real;
    rows += B;
  }
  return n > 0 ? loss / n : 0;
}

std::vector<int32_t> pair_sample_source(const RunPairs& pairs, const std::string& prompt) {
  const model::training::PairLayout& l = pairs.layout;
  std::vector<int32_t> ids = prompt.empty() ? std::vector<int32_t>(pairs.train.source(0).begin(),
                                                                   pairs.train.source(0).end())
                                            : pairs.source->encode(prompt);
  if (ids.empty() || ids.size() > l.S)
    throw std::runtime_error("--sample-prompt: " + std::to_string(ids.size()) +
                             " source tokens; a sample's source takes 1 to the pairs' longest, " +
                             std::to_string(l.S));
  if (ids.size() < l.S && !l.pad)
    throw std::runtime_error("--sample-prompt: " + std::to_string(ids.size()) +
                             " source tokens, fewer than the pairs' " + std::to_string(l.S) +
                             ", and the model has no pad_token_id to pad it with");
  if (l.pad && std::find(ids.begin(), ids.end(), *l.pad) != ids.end())
    throw std::runtime_error("--sample-prompt: the source holds the pad token");
  ids.resize(l.S, l.pad.value_or(0));
  return ids;
}

std::string sample_pair(model::training::GpuTrainer& trainer, const RunPairs& pairs,
                        const model::Config& c, std::span<const int32_t> source, uint32_t n) {
  const uint32_t T = trainer.context();
  const size_t V = c.n_vocab;
  // The decoder's inputs: the start token, then each id as it is chosen; the positions past
  // the current one hold the start token too, which a causal decoder never reads for it.
  std::vector<int32_t> inputs(T, *c.decoder_start_token_id), out;
  for (uint32_t t = 0; t < std::min(n, T); t++) {
    const std::vector<float> logits = trainer.target_logits(source, inputs);
    const auto row = logits.begin() + static_cast<std::ptrdiff_t>(t * V);
    const auto id =
        static_cast<int32_t>(std::max_element(row, row + static_cast<std::ptrdiff_t>(V)) - row);
    if (c.eos_token_id && id == *c.eos_token_id) break;
    out.push_back(id);
    if (t + 1 < T) inputs[t + 1] = id;
  }
  return pairs.target->decode_generated(out, c.n_vocab);
}

}  // namespace app
