"""Writes models/aab: a one-block, attention-only transformer whose every weight is set by hand
so that it continues the pattern aabaab... (models/aab/README.md derives each matrix).

    /usr/bin/python3 tools/aab/make_aab.py [--out DIR]

Plain Python (json, struct): fp32 little-endian safetensors, tensors in name order, the same
bytes on every run. Afterwards it runs its own forward pass over the written weights and
prints the last position's logits for each case of the README, so the table can be checked
against an implementation other than the engine's.
"""
import argparse
import json
import math
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

V, N_CTX, C = 2, 5, 8          # tokens a, b; context 5; width 8
A, B = 0, 1                    # token ids: the order of "chars"
POS = 2                        # residual dims 2..6: the one-hot position
CONST, SIGN = 6, 7             # head (value) dims: a constant 1, and +1 for a / -1 for b
SCALE = 20.0                   # attention_scale: q.k is 1 for the two latest positions, else 0
TO_B, TO_A = 8.0, 4.0          # c_proj: SIGN -> b's logit, CONST -> a's logit

# Only the keys this model uses: no MLP and no LayerNorm, so no n_inner, activation or epsilon.
CONFIG = {
    "model_type": "gpt2", "vocab_size": V, "n_positions": N_CTX, "n_embd": C, "n_layer": 1,
    "n_head": 1, "attention_only": True, "position_embedding": "learned",
    "attention_bias": False, "attention_scale": SCALE, "final_norm": False,
    "tie_word_embeddings": True, "tokenizer": "chars", "chars": "ab",
}


def zeros(rows, cols):
    return [[0.0] * cols for _ in range(rows)]


def weights():
    """The four tensors, as lists of rows (Conv1D orientation: y = x W)."""
    wte = zeros(V, C)                    # [V, C]: one-hot tokens in dims 0-1; also the head
    wte[A][A] = wte[B][B] = 1.0
    wpe = zeros(N_CTX, C)                # [n_ctx, C]: one-hot positions in dims 2-6
    for p in range(N_CTX):
        wpe[p][POS + p] = 1.0
    c_attn = zeros(C, 3 * C)             # [C, 3C]: q | k | v column blocks
    q, k, v = 0, C, 2 * C
    for p in range(N_CTX):
        c_attn[POS + p][k + POS + p] = 1.0          # k_j = e_j: the key is the position
        c_attn[POS + p][q + POS + p] = 1.0          # q_t = e_t + e_(t-1): this position ...
        if p > 0:
            c_attn[POS + p][q + POS + p - 1] = 1.0  # ... and the one before it
        c_attn[POS + p][v + CONST] = 1.0            # every position: value CONST = 1
    c_attn[A][v + SIGN] = 1.0                       # value SIGN: a -> +1
    c_attn[B][v + SIGN] = -1.0                      #             b -> -1
    c_proj = zeros(C, C)                 # [C, C]: head dims -> residual (logit) dims
    c_proj[SIGN][B] = TO_B
    c_proj[CONST][A] = TO_A
    return {"wte.weight": wte, "wpe.weight": wpe, "h.0.attn.c_attn.weight": c_attn,
            "h.0.attn.c_proj.weight": c_proj}


def write_safetensors(path, tensors):
    header, data = {}, b""
    for name in sorted(tensors):
        rows = tensors[name]
        raw = struct.pack("<%df" % (len(rows) * len(rows[0])), *[x for r in rows for x in r])
        header[name] = {"dtype": "F32", "shape": [len(rows), len(rows[0])],
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)  # padded to 8 bytes, as the reference writer does
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def matvec(x, w):  # x [K] times w [K, N]
    return [sum(x[i] * w[i][j] for i in range(len(x))) for j in range(len(w[0]))]


def last_logits(w, ids):
    """The model's forward pass for the last position of ids (at positions 0..len-1)."""
    xs = [[w["wte.weight"][t][c] + w["wpe.weight"][p][c] for c in range(C)]
          for p, t in enumerate(ids)]
    qkv = [matvec(x, w["h.0.attn.c_attn.weight"]) for x in xs]
    q = qkv[-1][:C]
    scores = [SCALE * sum(q[d] * r[C + d] for d in range(C)) for r in qkv]
    top = max(scores)
    e = [math.exp(s - top) for s in scores]
    att = [sum(e[j] * qkv[j][2 * C + d] for j in range(len(ids))) / sum(e) for d in range(C)]
    x = [a + b for a, b in zip(xs[-1], matvec(att, w["h.0.attn.c_proj.weight"]))]
    return [sum(x[c] * w["wte.weight"][t][c] for c in range(C)) for t in range(V)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "models" / "aab")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    w = weights()
    (args.out / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    write_safetensors(args.out / "model.safetensors", w)
    for text in ["a", "b", "aa", "ab", "ba", "bb", "aab", "baab", "abaab"]:
        logits = last_logits(w, ["ab".index(ch) for ch in text])
        print("%-6s a %8.4f  b %8.4f  -> %s" % (text, logits[A], logits[B],
                                                 "ab"[logits.index(max(logits))]))


if __name__ == "__main__":
    main()
