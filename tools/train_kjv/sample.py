#!/usr/bin/python3
"""Reads an exported model folder (config.json + model.safetensors) with its own safetensors
reader and a functional forward that shares no code with model.py, then generates text or
scores text. Matching losses from this forward and from the training module prove the export.

  /usr/bin/python3 tools/train_kjv/sample.py --prompt "And God said" --temperature 0.8
  /usr/bin/python3 tools/train_kjv/sample.py --heldout   # re-score models/kjv/heldout.txt

Perplexity convention (the project's): windows of N+1 tokens overlapping by one token,
window i = tokens[i*N .. i*N+N] inclusive with N = n_positions; each window scores its N
predictions, a last shorter window scores what remains; mean NLL in nats, ppl = exp(mean).
"""
import argparse
import copy
import json
import math
import os
import struct

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.normpath(os.path.join(HERE, "..", "..", "models", "kjv"))


def read_safetensors(path):
    """{name: fp32 tensor}; only F32 is expected from export.py."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    body = memoryview(raw)[8 + n:]
    out = {}
    for name, h in header.items():
        if h["dtype"] != "F32":
            raise SystemExit(f"{path}: {name}: dtype {h['dtype']}, expected F32")
        a, b = h["data_offsets"]
        if b - a != 4 * math.prod(h["shape"]) or b > len(body):
            raise SystemExit(f"{path}: {name}: data_offsets {a}..{b} do not fit shape {h['shape']}")
        out[name] = torch.frombuffer(bytearray(body[a:b]), dtype=torch.float32).reshape(h["shape"])
    return out


def load(model_dir, dtype=torch.float64):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    C, L = cfg["n_embd"], cfg["n_layer"]
    want = {"wte.weight": [cfg["vocab_size"], C], "wpe.weight": [cfg["n_positions"], C],
            "ln_f.weight": [C], "ln_f.bias": [C]}
    for i in range(L):
        p = f"h.{i}."
        want.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C], p + "ln_2.weight": [C],
                     p + "ln_2.bias": [C], p + "attn.c_attn.weight": [C, 3 * C],
                     p + "attn.c_proj.weight": [C, C], p + "mlp.c_fc.weight": [C, 4 * C],
                     p + "mlp.c_fc.bias": [4 * C], p + "mlp.c_proj.weight": [4 * C, C],
                     p + "mlp.c_proj.bias": [C]})
    if set(w) != set(want):
        raise SystemExit(f"{model_dir}: tensors differ from the config's: "
                         f"missing {sorted(set(want) - set(w))}, extra {sorted(set(w) - set(want))}")
    for name, shape in want.items():
        if list(w[name].shape) != shape:
            raise SystemExit(f"{model_dir}: {name}: shape {list(w[name].shape)}, expected {shape}")
    return cfg, {k: v.to(dtype) for k, v in w.items()}


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * g + b


def gelu(x):  # exact: x * Phi(x)
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def forward(cfg, w, ids):
    """[B, T] byte ids (T <= n_positions) -> [B, T, V] logits, GPT-2 Conv1D weights (y = x W)."""
    B, T = ids.shape
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    D = C // H
    x = w["wte.weight"][ids] + w["wpe.weight"][:T]  # [B, T, C]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        a = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"]  # [B, T, 3C]
        q, k, v = (qkv[..., j * C:(j + 1) * C].reshape(B, T, H, D).transpose(1, 2) for j in range(3))
        s = q @ k.transpose(-1, -2) / math.sqrt(D)  # [B, H, T, T]
        att = torch.softmax(s.masked_fill(future, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "attn.c_proj.weight"]
        m = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = gelu(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])  # [B, T, 4C]
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)
    return x @ w["wte.weight"].t()  # [B, T, V], tied head


def windows(n_tokens, N):
    """(start, end) of each scoring window over n_tokens tokens, end exclusive."""
    return [(s, min(s + N + 1, n_tokens)) for s in range(0, n_tokens - 1, N)]


@torch.no_grad()
def mean_nll(logits_fn, tokens, N):
    """(mean NLL in nats, tokens scored) of `tokens` (1-D long) under the windows convention.
    logits_fn maps [1, T] ids to [1, T, V] logits."""
    total, count = 0.0, 0
    for s, e in windows(len(tokens), N):
        chunk = tokens[s:e]
        logp = torch.log_softmax(logits_fn(chunk[None, :-1])[0].double(), dim=-1)
        total += -logp.gather(1, chunk[1:, None]).sum().item()
        count += len(chunk) - 1
    return total / count, count


def byte_tokens(b):
    return torch.tensor(list(b), dtype=torch.long)


@torch.no_grad()
def generate(cfg, w, prompt, n, temperature, seed):
    g = torch.Generator().manual_seed(seed)
    ids = list(prompt.encode("utf-8"))
    for _ in range(n):
        ctx = torch.tensor([ids[-cfg["n_positions"]:]])  # crop to the context window
        logits = forward(cfg, w, ctx)[0, -1]
        if temperature <= 0:
            nxt = int(logits.argmax())
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = int(torch.multinomial(probs, 1, generator=g))
        ids.append(nxt)
    return bytes(ids).decode("utf-8", errors="replace")


def ci_slice(logits_fn, heldout_file_bytes, N):
    """The first four windows of heldout.txt: what CI scores with the engine (the whole file
    takes minutes on a CPU Vulkan driver)."""
    ci = heldout_file_bytes[:4 * N + 1]
    nll, n = mean_nll(logits_fn, byte_tokens(ci), N)
    return {"bytes": len(ci), "tokens_scored": n, "mean_nll": nll, "ppl": math.exp(nll)}


def evaluate(model_dir, held_bytes, heldout_file_bytes, train_probe_bytes, reference=None):
    """Writes model_dir/heldout.txt and heldout.json (float64 from the exported fp32 weights)
    and returns a summary. With `reference` (the training nn.Module) it scores the same text
    with that module in float64 too, so the two forwards can be compared."""
    cfg, w = load(model_dir, torch.float64)
    N = cfg["n_positions"]
    exported = lambda ids: forward(cfg, w, ids)  # noqa: E731
    with open(os.path.join(model_dir, "heldout.txt"), "wb") as f:
        f.write(heldout_file_bytes)
    file_nll, file_n = mean_nll(exported, byte_tokens(heldout_file_bytes), N)
    held_nll, held_n = mean_nll(exported, byte_tokens(held_bytes), N)
    train_nll, train_n = mean_nll(exported, byte_tokens(train_probe_bytes), N)
    record = {"file": "heldout.txt", "ctx": N, "tokens_scored": file_n, "mean_nll": file_nll,
              "ppl": math.exp(file_nll)}
    record["ci_slice"] = ci_slice(exported, heldout_file_bytes, N)
    with open(os.path.join(model_dir, "heldout.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    summary = {"heldout_txt": record,
               "heldout_split": {"bytes": len(held_bytes), "tokens_scored": held_n,
                                 "mean_nll": held_nll, "ppl": math.exp(held_nll)},
               "train_probe": {"bytes": len(train_probe_bytes), "tokens_scored": train_n,
                               "mean_nll": train_nll, "ppl": math.exp(train_nll)}}
    if reference is not None:
        ref = copy.deepcopy(reference).double().eval()
        ref_file, _ = mean_nll(ref, byte_tokens(heldout_file_bytes), N)
        ref_held, _ = mean_nll(ref, byte_tokens(held_bytes), N)
        summary["training_module_float64"] = {"heldout_txt_mean_nll": ref_file,
                                              "heldout_split_mean_nll": ref_held}
        summary["abs_diff_heldout_txt"] = abs(ref_file - file_nll)
        summary["abs_diff_heldout_split"] = abs(ref_held - held_nll)
        # Per-logit agreement on the first windows: a mean can hide small offsetting errors.
        ids = byte_tokens(heldout_file_bytes[:4 * N]).reshape(4, N)
        summary["max_abs_logit_diff"] = (ref(ids) - exported(ids)).abs().max().item()
    return summary


def main():
    ap = argparse.ArgumentParser(description="generate from / score an exported byte-level model")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--n", type=int, default=300, help="bytes to generate")
    ap.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heldout", action="store_true",
                    help="score <model>/heldout.txt and compare with heldout.json")
    ap.add_argument("--score", metavar="FILE", help="score FILE's bytes (float64)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.score:
        cfg, w = load(args.model, torch.float64)
        with open(args.score, "rb") as f:
            nll, n = mean_nll(lambda ids: forward(cfg, w, ids), byte_tokens(f.read()), cfg["n_positions"])
        print(f"{args.score}: {n} tokens scored, mean NLL {nll:.6f} nats, ppl {math.exp(nll):.6f}")
        return
    if args.heldout:
        cfg, w = load(args.model, torch.float64)
        with open(os.path.join(args.model, "heldout.txt"), "rb") as f:
            nll, n = mean_nll(lambda ids: forward(cfg, w, ids), byte_tokens(f.read()), cfg["n_positions"])
        with open(os.path.join(args.model, "heldout.json")) as f:
            rec = json.load(f)
        print(f"heldout.txt: {n} tokens scored, mean NLL {nll:.6f} nats, ppl {math.exp(nll):.6f}")
        print(f"heldout.json: {rec['tokens_scored']} tokens scored, mean NLL {rec['mean_nll']:.6f}, "
              f"ppl {rec['ppl']:.6f}; |diff| {abs(nll - rec['mean_nll']):.2e}")
        return
    cfg, w = load(args.model, torch.float32)
    print(generate(cfg, w, args.prompt, args.n, args.temperature, args.seed))


if __name__ == "__main__":
    main()
