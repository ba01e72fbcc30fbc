#include "apps/train_pairs.h"

#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "apps/commands.h"
#include "apps/seq2seq_session.h"
#include "model/text/sentencepiece.h"

namespace app {

void check_pairs_run(const model::training::RunFlags& run, bool sample_every,
                     const std::function<bool(const std::string&)>& given) {
  const std::string what = "an encoder-decoder (Marian) ";
  if (run.recompute)
    throw std::runtime_error("--recompute: " + what +
                             "keeps every activation of its step (no "
                             "recomputation yet)");
  if (sample_every)
    throw std::runtime_error("--sample-every: " + what +
                             "prints no samples between steps yet; "
                             "run `gpt2vk seq2seq -m` on a checkpoint");
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
  const auto source = model::load_sentencepiece(dir, spm_flavor(c), model::SpmSide::Source);
  const auto target = model::load_sentencepiece(dir, spm_flavor(c), model::SpmSide::Target);
  if (!c.decoder_start_token_id)
    throw std::runtime_error(dir.string() + "/config.json: no decoder_start_token_id");
  const auto read = [&](const std::string& f) {
    model::training::Pairs p = model::training::read_pairs(
        f, read_file(f), [&](std::string_view t) { return source->encode(t); },
        [&](std::string_view t) { return target->encode(t); }, *c.decoder_start_token_id);
    for (const auto& [n, side] : {std::pair{p.S, "source"}, {p.T, "target"}})
      if (n > c.n_ctx)
        throw std::runtime_error(f + ": a " + std::string(side) + " of " + std::to_string(n) +
                                 " tokens is past the model's context of " +
                                 std::to_string(c.n_ctx));
    return p;
  };
  RunPairs r{read(file), {}};
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

}  // namespace app
