// An encoder-decoder folder a command or the server can open whole: the Marian fixture saved by
// transformers (tests/data/hf/marian, random weights over a 64-token vocabulary, no tokenizer
// files) given SentencePiece models trained here (tests/data/spm) and a vocab.json of 64 of
// their pieces.
#pragma once
#include <filesystem>

namespace test {

// Writes into `dir` the fixture's config, weights and generation_config.json, with source.spm and
// target.spm the unigram model and vocab.json "</s>" 0, "<unk>" 1, 61 of the model's pieces,
// "<pad>" 63.
void marian_folder(const std::filesystem::path& dir);

}  // namespace test
