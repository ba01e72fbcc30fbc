// What the encoder commands and the server share: opening a BERT folder (its checkpoint, its
// WordPiece vocabulary, the encoder on the chosen device) and pooling hidden states into a
// sentence embedding as sentence-transformers does.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "apps/session.h"
#include "model/forward/encoder.h"
#include "model/text/wordpiece.h"

namespace app {

struct EncoderSession {
  std::unique_ptr<model::Checkpoint> checkpoint;
  std::unique_ptr<model::WordPiece> wordpiece;
  std::unique_ptr<vk::Instance> instance;
  std::unique_ptr<vk::Device> device;
  std::unique_ptr<model::Encoder> encoder;
};

// The checkpoint (an encoder's, else a clear error), its WordPiece vocabulary, and the encoder
// on the device --device names (the CPU reference for "cpu"); warnings on stderr.
EncoderSession open_encoder(const ModelArgs& args);

// [CLS] text [SEP] within the model's positions, with a note on stderr naming `where` when the
// end was cut.
model::WordPieceEncoding encode_text(const EncoderSession& s, const std::string& text,
                                     const std::string& where);

struct Pooling {
  std::string mode;  // "mean" (every token, [CLS] and [SEP] too) or "cls"
  bool normalize = false;
};

// What a sentence-transformers folder asks for (modules.json: its Pooling module's mode, and
// Normalize), over `asked` (--pooling given wins; --normalize adds); mean where nothing says.
Pooling folder_pooling(const std::filesystem::path& dir, Pooling asked);

// One sentence embedding [C] from hidden states [T, C].
std::vector<float> pool(std::span<const float> hidden, size_t T, uint32_t C, const Pooling& p);

}  // namespace app
