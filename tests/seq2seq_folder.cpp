#include "tests/seq2seq_folder.h"

#include <nlohmann/json.hpp>

#include "model/text/sentencepiece.h"
#include "tests/files.h"

namespace test {

void marian_folder(const std::filesystem::path& dir) {
  const std::filesystem::path fixture = source_dir() / "tests/data/hf/marian";
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
    std::filesystem::copy_file(fixture / f, dir / f);
  const std::string spm = read_file(source_dir() / "tests/data/spm/unigram.model");
  write_file(dir / "source.spm", spm);
  write_file(dir / "target.spm", spm);
  // The model's pieces in its own order, read as a T5 folder reads them.
  TempDir t5;
  write_file(t5.path() / "spiece.model", spm);
  const auto tok = model::load_sentencepiece(t5.path(), model::SpmFlavor::T5);
  nlohmann::json vocab = {{"</s>", 0}, {"<unk>", 1}};
  for (int32_t id = 0; vocab.size() < 63; id++) {
    const std::string p = tok->piece(id);
    if (p.front() != '<' && !vocab.contains(p)) vocab[p] = vocab.size();
  }
  vocab["<pad>"] = 63;
  write_file(dir / "vocab.json", vocab.dump());
}

}  // namespace test
