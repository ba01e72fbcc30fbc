#include "apps/train_pairs.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "apps/commands.h"
#include "apps/seq2seq_session.h"
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
                             "takes its lengths from its pairs (every "
                             "pair's source and target lengths)");
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
    model::training::Pairs p = model::training::read_pairs(
        f, read_file(f), [&](std::string_view t) { return r.source->encode(t); },
        [&](std::string_view t) { return r.target->encode(t); }, *c.decoder_start_token_id);
    for (const auto& [n, side] : {std::pair{p.S, "source"}, {p.T, "target"}})
      if (n > c.n_ctx)
        throw std::runtime_error(f + ": a " + std::string(side) + " of " + std::to_string(n) +
                                 " tokens is past the model's context of " +
                                 std::to_string(c.n_ctx));
    return p;
  };
  r.train = read(file);
  if (val_file.empty()) return r;
  r.val = read(val_file);
  const model::training::Pairs &t = r.train, &v = r.val;
  if (v.S != t.S || v.T != t.T || v.size() < B)
    throw std::runtime_error(val_file + ": " + std::to_string(v.size()) + " pairs of " +
                             std::to_string(v.S) + " and " + std::to_string(v.T) +
                             " tokens; an evaluation takes B=" + std::to_string(B) +
                             " pairs of the training data's " + std::to_string(t.S) + " and " +
                             std::to_string(t.T));
  return r;
}

std::vector<int32_t> pair_ids(const model::training::Pairs& pairs) {
  std::vector<int32_t> ids = pairs.sources;
  ids.insert(ids.end(), pairs.targets.begin(), pairs.targets.end());
  return ids;
}

double evaluate_pairs(model::training::GpuTrainer& trainer, const model::training::Pairs& pairs,
                      uint64_t& rows) {
  const uint32_t B = trainer.batch();
  std::vector<uint64_t> batch(B);
  std::vector<int32_t> sources, inputs, targets;
  double loss = 0;
  rows = 0;
  for (uint64_t r0 = 0; r0 + B <= pairs.size(); r0 += B) {
    std::iota(batch.begin(), batch.end(), r0);
    model::training::gather_pairs(pairs, batch, sources, inputs, targets);
    loss += trainer.evaluate(inputs, targets, sources) * B;
    rows += B;
  }
  return rows ? loss / static_cast<double>(rows) : 0;
}

std::vector<int32_t> pair_sample_source(const RunPairs& pairs, const std::string& prompt) {
  const model::training::Pairs& t = pairs.train;
  if (prompt.empty()) return {t.sources.begin(), t.sources.begin() + t.S};
  std::vector<int32_t> ids = pairs.source->encode(prompt);
  if (ids.size() != t.S)
    throw std::runtime_error("--sample-prompt: " + std::to_string(ids.size()) +
                             " source tokens; a sample's source takes the pairs' " +
                             std::to_string(t.S));
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
