#include "tests/train_files.h"

#include <string>

#include "model/formats/config.h"

namespace test {

TrainFiles::TrainFiles() {
  model::Config c = model::gpt2_config(32, 2, 2);
  c.n_vocab = 256;
  c.n_ctx = 16;
  c.n_inner = 64;
  c.tokenizer.kind = model::TokenizerKind::Bytes;
  c.eos_token_id.reset();
  write_file(config, model::config_json(c));
  std::string text;
  for (int i = 0; i < 60; i++) text += "In the beginning God created the heaven and the earth. ";
  write_file(data, text);
  write_file(val, text.substr(0, 600));
}

}  // namespace test
