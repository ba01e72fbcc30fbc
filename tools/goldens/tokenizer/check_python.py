"""A third, Python check of the goldens: the algorithm of OpenAI's gpt-2 src/encoder.py (the
`regex` module, whose \\s is Unicode White_Space like tiktoken's) over data/gpt2/.

  python3 check_python.py            checks every case of tests/data/tokenizer/goldens.json
  python3 check_python.py TEXT...    prints the ids of each TEXT (Python escapes allowed, e.g.
                                     'a\\x85b'), for the cases JavaScript's \\s gets wrong

Needs `pip install regex`. Exits non-zero on a mismatch.
"""
import json
import os
import sys

import regex

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
EOT = "<|endoftext|>"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def load():
    with open(os.path.join(ROOT, "data", "gpt2", "vocab.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    with open(os.path.join(ROOT, "data", "gpt2", "merges.txt"), encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f.read().split("\n")[1:-1]]
    return encoder, {m: i for i, m in enumerate(merges)}


def bpe(word, ranks):
    parts = list(word)
    while len(parts) > 1:
        pairs = set(zip(parts, parts[1:]))
        best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if best not in ranks:
            break
        merged, i = [], 0
        while i < len(parts):
            if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                merged.append(parts[i] + parts[i + 1])
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = merged
    return parts


def encode(text, encoder, ranks, byte_encoder):
    ids = []
    for k, part in enumerate(text.split(EOT)):
        if k > 0:
            ids.append(encoder[EOT])
        for token in PAT.findall(part):
            word = "".join(byte_encoder[b] for b in token.encode("utf-8"))
            ids.extend(encoder[t] for t in bpe(word, ranks))
    return ids


def main():
    encoder, ranks = load()
    byte_encoder = bytes_to_unicode()
    if len(sys.argv) > 1:
        for arg in sys.argv[1:]:
            text = arg.encode("latin-1", "backslashreplace").decode("unicode_escape")
            print(json.dumps(text), encode(text, encoder, ranks, byte_encoder))
        return 0
    with open(os.path.join(ROOT, "tests", "data", "tokenizer", "goldens.json"), encoding="utf-8") as f:
        goldens = json.load(f)
    bad = 0
    for i, g in enumerate(goldens):
        ids = encode(g["text"], encoder, ranks, byte_encoder)
        if ids != g["ids"]:
            print(f"case {i} {g['text'][:60]!r}: Python gives {ids[:20]}, goldens {g['ids'][:20]}")
            bad += 1
    print(f"{len(goldens) - bad} of {len(goldens)} goldens match OpenAI's encoder.py algorithm")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
