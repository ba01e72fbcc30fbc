// GPT-2's byte-level BPE tokenizer (vocab.json, merges.txt), built on model/text/bpe.h.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "model/text/tokenizer.h"

namespace model {

// GPT-2's tokenizer from the contents of vocab.json and merges.txt; the names are for messages.
// Thread-safe: encode() may run on several threads at once (the word cache is locked).
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(std::string_view vocab_json,
                                               std::string_view merges_txt,
                                               const std::string& vocab_file,
                                               const std::string& merges_file);

}  // namespace model
