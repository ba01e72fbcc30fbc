"""BERT in float64, written from the published definition (Devlin et al. 2018, as Hugging Face's
modeling_bert lays it out), reading a Hugging Face BERT folder with gpt2_ref's safetensors reader.

    /usr/bin/python3 tools/reference/bert_ref.py --check [DIR ...]   (default: tests/data/hf/bert-*)
    /usr/bin/python3 tools/reference/bert_ref.py --bench DIR [--texts 32] [--tokens 128] [--threads 2]

--check runs every fixture's inputs (expected.safetensors: input_ids, token_type_ids,
attention_mask, and a pair) and compares the hidden states, the head's logits and a
sentence-transformers folder's embeddings with what transformers / sentence-transformers saved
there: the independent reference checked once against the implementation nobody here wrote.
Exits non-zero beyond 1e-9 of the row's scale (float64 against float64).

--bench times the float32 forward of a batch (texts x tokens, all real tokens, no padding) on
the CPU with torch's threads set: what PyTorch on a laptop CPU gives, for the tokens/s that
`gpt2vk bench`/`embed` are held against (docs/benchmark.md).
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt2_ref import read_safetensors  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def load(folder, dtype=torch.float64):
    """(config, {plain name: tensor}) with "bert." dropped and LayerNorm gamma/beta renamed."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    raw, _ = read_safetensors(folder / "model.safetensors")
    w = {}
    for name, t in raw.items():
        name = name.removeprefix("bert.")
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if t.is_floating_point():
            w[name] = t.to(dtype)
    return config, w


def gelu(x, kind):
    if kind == "gelu":  # erf
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    if kind in ("gelu_new", "gelu_pytorch_tanh"):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if kind == "relu":
        return torch.clamp(x, min=0)
    raise ValueError(f"hidden_act {kind!r}")


def layer_norm(x, w, name, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]


def linear(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def encode(config, w, ids, types, mask):
    """Hidden states [B, T, C] of ids [B, T] with token types and an attention mask (1 = real)."""
    B, T = ids.shape
    C, H = config["hidden_size"], config["num_attention_heads"]
    D, eps, act = C // H, config.get("layer_norm_eps", 1e-12), config.get("hidden_act", "gelu")
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][types]
         + w["embeddings.position_embeddings.weight"][torch.arange(T)])
    x = layer_norm(x, w, "embeddings.LayerNorm", eps)
    # A padded key takes no weight: its score is -inf before the softmax.
    bias = torch.zeros(B, 1, 1, T, dtype=x.dtype).masked_fill(mask[:, None, None, :] == 0, -math.inf)
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        heads = lambda y: y.view(B, T, H, D).transpose(1, 2)  # noqa: E731  [B, H, T, D]
        q, k, v = (heads(linear(x, w, p + "attention.self." + n)) for n in ("query", "key", "value"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(D) + bias
        ctx = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T, C)
        x = layer_norm(linear(ctx, w, p + "attention.output.dense") + x, w, p + "attention.output.LayerNorm", eps)
        inner = gelu(linear(x, w, p + "intermediate.dense"), act)
        x = layer_norm(linear(inner, w, p + "output.dense") + x, w, p + "output.LayerNorm", eps)
    return x


def head(config, w, hidden):
    """The logits of the folder's head (architectures[0]), or None for BertModel."""
    arch = (config.get("architectures") or ["BertModel"])[0]
    eps, act = config.get("layer_norm_eps", 1e-12), config.get("hidden_act", "gelu")
    if arch == "BertForMaskedLM":
        t = layer_norm(gelu(linear(hidden, w, "cls.predictions.transform.dense"), act), w,
                       "cls.predictions.transform.LayerNorm", eps)
        decoder = w.get("cls.predictions.decoder.weight", w["embeddings.word_embeddings.weight"])
        return t @ decoder.T + w["cls.predictions.bias"]
    if arch == "BertForSequenceClassification":
        pooled = torch.tanh(linear(hidden[:, 0], w, "pooler.dense"))
        return linear(pooled, w, "classifier")
    if arch == "BertForTokenClassification":
        return linear(hidden, w, "classifier")
    return None


def scaled_error(got, ref):
    scale = ref.abs().amax(-1, keepdim=True).clamp(min=1)
    return ((got - ref).abs() / scale).max().item()


def check(folder):
    config, w = load(folder)
    e, _ = read_safetensors(Path(folder) / "expected.safetensors")
    ids, mask = e["input_ids"], e["attention_mask"]
    types = e.get("token_type_ids", torch.zeros_like(ids))
    hidden = encode(config, w, ids, types, mask)
    worst = {}
    real = mask.bool()
    if "hidden" in e:
        worst["hidden"] = scaled_error(hidden[real], e["hidden"][real])
    logits = head(config, w, hidden)
    if logits is not None:
        got, ref = (logits[real], e["logits"][real]) if logits.dim() == 3 else (logits, e["logits"])
        worst["logits"] = scaled_error(got, ref)
    if "embeddings" in e:  # sentence-transformers: mean over real tokens, then unit length
        m = mask[..., None].to(hidden.dtype)
        mean = (hidden * m).sum(1) / m.sum(1)
        worst["embeddings"] = scaled_error(mean / mean.norm(dim=-1, keepdim=True), e["embeddings"])
    if "pair_input_ids" in e:
        pair = encode(config, w, e["pair_input_ids"], e["pair_token_type_ids"], torch.ones_like(e["pair_input_ids"]))
        worst["pair_hidden"] = scaled_error(pair, e["pair_hidden"])
        if (pl := head(config, w, pair)) is not None:
            worst["pair_logits"] = scaled_error(pl, e["pair_logits"])
    return worst


def bench(folder, texts, tokens, threads):
    torch.set_num_threads(threads)
    config, w = load(folder, torch.float32)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, config["vocab_size"], (texts, tokens), generator=g)
    types, mask = torch.zeros_like(ids), torch.ones_like(ids)
    with torch.inference_mode():
        encode(config, w, ids[:1], types[:1], mask[:1])  # warm up
        start = time.perf_counter()
        encode(config, w, ids, types, mask)
        seconds = time.perf_counter() - start
    print(f"torch {torch.__version__} float32, {threads} threads: {texts} x {tokens} tokens in "
          f"{seconds:.3f} s = {texts * tokens / seconds:.0f} tokens/s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", nargs="*")
    ap.add_argument("--bench")
    ap.add_argument("--texts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.bench:
        bench(a.bench, a.texts, a.tokens, a.threads)
        return 0
    folders = a.check or sorted(str(p) for p in (ROOT / "tests/data/hf").glob("bert-*"))
    bad = 0
    for folder in folders:
        worst = check(folder)
        ok = all(v <= 1e-9 for v in worst.values())
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {Path(folder).name}: " +
              ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
