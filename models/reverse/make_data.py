"""The reversal task of models/reverse: strings of 4 to 12 letters over a-j (each length equally
likely) and their reversals, 20,000 to train on and 2,000 held out (no string in both), and the folder --init reads: a character-level
SentencePiece model of the letters (source.spm = target.spm), Marian's vocab.json over its pieces,
and config.json (Marian's block, width 64, 2 + 2 layers, 4 heads). Deterministic: Python's
random with seed 7, sentencepiece's trainer on fixed input.

    python3 models/reverse/make_data.py OUT_DIR
"""
import json
import random
import sys
from pathlib import Path

import sentencepiece as spm

LETTERS = "abcdefghij"
N_TRAIN, N_HELD, LENGTHS = 20000, 2000, range(4, 13)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    seen, strings = set(), []
    while len(strings) < N_TRAIN + N_HELD:
        s = "".join(rng.choice(LETTERS) for _ in range(rng.choice(LENGTHS)))
        if s not in seen:
            seen.add(s)
            strings.append(s)
    for name, part in (("train.tsv", strings[:N_TRAIN]), ("heldout.tsv", strings[N_TRAIN:])):
        (out / name).write_text("".join(f"{s}\t{s[::-1]}\n" for s in part))
    # One piece a letter, and SentencePiece's word start; no normalisation.
    (out / "letters.txt").write_text(LETTERS + "\n" + LETTERS[::-1] + "\n")
    spm.SentencePieceTrainer.train(input=str(out / "letters.txt"), model_prefix=str(out / "char"),
                                   model_type="char", vocab_size=13, character_coverage=1.0,
                                   bos_id=-1, eos_id=1, unk_id=0,
                                   normalization_rule_name="identity", minloglevel=2)
    (out / "letters.txt").unlink()
    (out / "char.vocab").unlink()
    model = (out / "char.model").read_bytes()
    (out / "char.model").unlink()
    for side in ("source.spm", "target.spm"):
        (out / side).write_bytes(model)
    # Marian's ids: </s> 0, <unk> 1, the pieces, <pad> last (also the decoder's start).
    sp = spm.SentencePieceProcessor(model_proto=model)
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        if sp.id_to_piece(i) not in ("<unk>", "</s>"):
            vocab[sp.id_to_piece(i)] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    V = len(vocab)
    config = {
        "model_type": "marian", "architectures": ["MarianMTModel"], "is_encoder_decoder": True,
        "activation_function": "swish", "d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 256,
        "decoder_ffn_dim": 256, "max_position_embeddings": 32, "scale_embedding": True,
        "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True, "vocab_size": V,
        "decoder_vocab_size": V, "eos_token_id": 0, "forced_eos_token_id": 0, "pad_token_id": V - 1,
        "decoder_start_token_id": V - 1}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")


if __name__ == "__main__":
    main()
