"""Reference ids for the SentencePiece check (tests/test_sentencepiece.cpp), from Google's Python
sentencepiece library (Debian's python3-sentencepiece) over tests/data/spm's corpus and models.

    /usr/bin/python3 tools/reference/spm_ref.py OUT   # writes OUT/expected.json

expected.json: "texts", the corpus's lines; then per model ("unigram", "bpe"):
  "pieces"  the model's pieces by id;
  "ids"     per text, T5Tokenizer's encoding: the model's ids, then its eos id;
  "text"    per text, the model's detokenization of those ids without eos, pad and unk
            (T5Tokenizer.decode with skip_special_tokens=True, before its final strip);
  "text_pieces"  for every SAMPLE-th text, the model's pieces (the Marian check's input).
The corpus holds none of the special tokens' texts (checked), so T5Tokenizer cutting them out of
the text first would change nothing here.
"""
import json
import lzma
import sys
from pathlib import Path

import sentencepiece

DATA = Path(__file__).resolve().parents[2] / "tests/data/spm"
SAMPLE = 8


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: spm_ref.py OUT")
    out = Path(sys.argv[1])
    texts = lzma.decompress((DATA / "corpus.txt.xz").read_bytes()).decode("utf-8").split("\n")
    if texts[-1] != "":
        sys.exit("corpus.txt.xz: the last line has no newline")
    texts.pop()
    expected = {"texts": texts}
    for name in ("unigram", "bpe"):
        sp = sentencepiece.SentencePieceProcessor(model_file=str(DATA / f"{name}.model"))
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        specials = {i for i in (sp.eos_id(), sp.pad_id(), sp.unk_id()) if i >= 0}
        for token in [pieces[i] for i in specials] + ["<extra_id_"]:
            if any(token in t for t in texts):
                sys.exit(f"the corpus holds {token!r}, which T5Tokenizer would cut out first")
        ids = sp.encode(texts)
        expected[name] = {
            "pieces": pieces,
            "ids": [x + [sp.eos_id()] for x in ids],
            "text": sp.decode([[i for i in x if i not in specials] for x in ids]),
            "text_pieces": sp.encode(texts[::SAMPLE], out_type=str),
        }
    out.mkdir(parents=True, exist_ok=True)
    (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
