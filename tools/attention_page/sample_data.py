"""Writes a test instance of apps/attention_page.html with made-up attention weights, to look at
the page by hand or in headless Chromium without building gpt2vk.

    python3 tools/attention_page/sample_data.py --layers 12 --heads 12 --tokens 256 -o /tmp/page.html

The weights come from no model: each head leans on one key (the previous token, the first token,
itself; the next token too when --bidirectional) or on none (diffuse), plus noise, so that every
kind of map the page draws is present. Standard library only.
"""
import argparse
import base64
import json
import math
import random
import re
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = "/*GPT2VK_DATA*/null"
# Includes a newline, a tab, markup and "</script>" so the page's escaping is exercised too.
TEXT = ("In the beginning God created the heaven and the earth.\nAnd the earth was without form,"
        " and void; and darkness was upon the face of the deep.\tAnd God said, Let there be"
        " light: and there was light. </script> <b>&amp;\n")
VISIBLE = {" ": "\u2423", "\n": "\u21b5", "\t": "\u2192"}   # as the engine shows whitespace


def tokens(n):
    words = re.findall(r" ?[^\s]+|\n|\t", TEXT)
    out = [words[i % len(words)] for i in range(n)]
    return ["".join(VISIBLE.get(ch, ch) for ch in w) for w in out]


def head_rows(kind, T, causal, rng):
    """[T][T] weights of one head: row q is a softmax over keys 0..q (causal) or 0..T-1."""
    rows = []
    for q in range(T):
        n = q + 1 if causal else T
        s = [rng.gauss(0, 0.3 if kind == "diffuse" else 0.8) for _ in range(n)]
        k = {"previous token": q - 1, "first token": 0, "self": q, "next token": q + 1}.get(kind)
        if k is not None and 0 <= k < n:
            s[k] += 5.0
        top = max(s)
        e = [math.exp(x - top) for x in s]
        z = sum(e)
        rows.append([x / z for x in e] + [0.0] * (T - n))
    return rows


def describe(rows):
    """One line like the engine's: the pattern with the largest mean weight, or diffuse."""
    T = len(rows)
    means = {
        "previous token": sum(rows[q][q - 1] for q in range(1, T)) / max(T - 1, 1),
        "first token": sum(r[0] for r in rows) / T,
        "self": sum(rows[q][q] for q in range(T)) / T,
        "next token": sum(rows[q][q + 1] for q in range(T - 1)) / max(T - 1, 1),
    }
    name = max(means, key=means.get)
    if means[name] < 0.3:
        return f"diffuse, top weight {max(max(r) for r in rows):.2f}"
    return f"{name} {means[name]:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--first-layer", type=int, default=0,
                    help="index of the first layer shown, as when gpt2vk is asked for a subset")
    ap.add_argument("--bidirectional", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--out", default="/tmp/page.html")
    a = ap.parse_args()

    rng = random.Random(a.seed)
    causal, T = not a.bidirectional, a.tokens
    kinds = ["previous token", "first token", "self", "diffuse"] + ([] if causal else ["next token"])
    blob, summary = bytearray(), []
    for _ in range(a.layers):
        summary.append([])
        for _ in range(a.heads):
            rows = head_rows(rng.choice(kinds), T, causal, rng)
            summary[-1].append(describe(rows))
            for r in rows:
                blob += struct.pack(f"<{T}e", *r)

    toks = tokens(T)
    data = {
        "title": "sample: " + json.dumps("".join(toks[:6]) + ("\u2026" if T > 6 else ""), ensure_ascii=False),
        "model": "sample (fabricated weights)", "device": "none (sample_data.py)", "precision": "f16",
        "n_layer": a.first_layer + a.layers, "n_head": a.heads,
        "layers": list(range(a.first_layer, a.first_layer + a.layers)), "heads": list(range(a.heads)),
        "causal": causal, "T": T, "tokens": toks, "ids": [rng.randrange(50257) for _ in range(T)],
        "probs": base64.b64encode(bytes(blob)).decode("ascii"), "summary": summary,
    }
    # "<" as \u003c: a token "</script>" must not end the page's script (the C++ writer does the same).
    js = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    page = (ROOT / "apps" / "attention_page.html").read_text(encoding="utf-8")
    if page.count(PLACEHOLDER) != 1:
        raise SystemExit(f"apps/attention_page.html must hold {PLACEHOLDER} exactly once")
    Path(a.out).write_text(page.replace(PLACEHOLDER, js), encoding="utf-8")
    print(f"{a.out}: {a.layers}x{a.heads} heads, T={T}, {'causal' if causal else 'bidirectional'}, "
          f"{Path(a.out).stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
