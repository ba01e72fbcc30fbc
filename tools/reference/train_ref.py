"""An independent PyTorch reference of gpt2vk's training contract (issue 17), in float64.

The model is gpt2_ref.forward (torch primitives, no engine code) under autograd; the contract's
pieces are written here from its text (docs/training.md): llm.c's unshuffled loader or random
windows drawn by splitmix64 (issue 41), the mean cross-entropy over the N*B*T targets of N
micro-batches of B rows (each micro-batch's share backpropagated in turn, the gradients summed
by autograd), the global gradient norm with clip / (norm + 1e-6) above --grad-clip
(torch.nn.utils.clip_grad_norm_), torch.optim.AdamW with weight decay on tensors of two or more
dimensions only, and the warm-up / cosine schedule. For each model it writes, into
tests/data/training/<model>/:

  grads.safetensors   the first step's gradients (F32), every tensor of the checkpoint
  trajectory.json     the settings and the losses of 10 AdamW steps (each before its update)

Run it with Debian's interpreter (python3-torch 1.13); the output is the same on every run:

    /usr/bin/python3 tools/reference/train_ref.py

With --checkpoint it runs one model instead, on token ids given as little-endian int32 (the
suite's test_train_shapes.cpp does, at the shapes users train), and writes OUT/grads.safetensors
and OUT/trajectory.json:

    train_ref.py --checkpoint DIR --ids IDS --out OUT [--batch B] [--ctx T] [--steps N]
                 [--lr LR --warmup W --lr-min LR] [--dtype float32 --device cuda] [--no-grads]
                 [--sampling random --seed S] [--grad-accum N]

With --sampling random, trajectory.json also holds each step's window offsets ("offsets").
"""
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt2_ref  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TEXT = ROOT / "models" / "kjv" / "heldout.txt"  # byte-level data for the byte-level models
SETTINGS = {"batch": 2, "ctx": 16, "steps": 10, "lr": 3e-3, "beta1": 0.9, "beta2": 0.95,
            "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0, "warmup": 3, "cosine": True,
            "lr_min": 3e-4, "data_bytes": 4000}
MODELS = ["gpt2-tiny", "tinygpt"]  # GPT-2's block; the shipped KJV model's variant


MASK = (1 << 64) - 1


def splitmix64(state):
    """(the next state, its draw): Steele, Lea and Flood's generator, as docs/training.md."""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def uniform_below(state, n):
    """(the next state, a draw uniform in [0, n)): draws below 2^64 - (2^64 mod n), mod n."""
    limit = (1 << 64) - (1 << 64) % n
    while True:
        state, x = splitmix64(state)
        if x < limit:
            return state, x % n


class Windows:
    """The contract's data order: each step's rows (N micro-batches of B, in order) as
    sequential windows from a position, or random windows of T+1 tokens from the generator."""

    def __init__(self, tokens, rows, T, sampling="sequential", seed=1):
        self.tokens, self.rows, self.T, self.sampling = tokens, rows, T, sampling
        self.position, self.state = 0, seed

    def next(self):
        """(inputs [rows][T], targets [rows][T], the offsets of random windows or None)."""
        if self.sampling == "sequential":
            rows, targets, self.position = batch(self.tokens, self.position, self.rows, self.T)
            return rows, targets, None
        offsets = []
        for _ in range(self.rows):
            self.state, o = uniform_below(self.state, len(self.tokens) - self.T)
            offsets.append(o)
        return ([self.tokens[o:o + self.T] for o in offsets],
                [self.tokens[o + 1:o + self.T + 1] for o in offsets], offsets)


def batch(tokens, position, B, T):
    """The contract's step: B*T+1 tokens from position (restarting at 0 when they would pass
    the end); returns (inputs [B][T], targets [B][T], the next position)."""
    if position + B * T + 1 > len(tokens):
        position = 0
    chunk = tokens[position:position + B * T + 1]
    rows = [chunk[b * T:b * T + T] for b in range(B)]
    targets = [chunk[b * T + 1:b * T + T + 1] for b in range(B)]
    return rows, targets, position + B * T


def learning_rate(s, step):
    W, N = s["warmup"], s["steps"]
    if step < W:
        return s["lr"] * (step + 1) / W
    if not s["cosine"] or N <= W:
        return s["lr"]
    return s["lr_min"] + 0.5 * (s["lr"] - s["lr_min"]) * (1 + math.cos(math.pi * (step - W) / (N - W)))


def loss_of(config, params, rows, targets, dtype=torch.float64, mean_over=None):
    """The summed cross-entropy of rows over mean_over targets (default: theirs, a mean)."""
    total = 0
    for ids, tgt in zip(rows, targets):
        logits = gpt2_ref.forward(config, params, ids, dtype)             # [T, V]
        total = total + torch.nn.functional.cross_entropy(
            logits, torch.tensor(tgt, device=logits.device), reduction="sum")
    return total / (mean_over or len(rows) * len(rows[0]))


def accumulate(config, params, rows, targets, micro, dtype):
    """Gradient accumulation: each of `micro` micro-batches (consecutive groups of the rows) its
    loss over all the rows' targets backpropagated in turn, so .grad sums to the mean's
    gradient. Returns the mean loss (their sum)."""
    B, n = len(rows) // micro, len(rows) * len(rows[0])
    total = 0.0
    for m in range(micro):
        loss = loss_of(config, params, rows[m * B:(m + 1) * B], targets[m * B:(m + 1) * B],
                       dtype, n)
        loss.backward()
        total += float(loss)
    return total


def run(name):
    """The goldens of tests/data/training/<name>, from tests/data/models/<name>."""
    s = SETTINGS
    tokens = list(TEXT.read_bytes()[:s["data_bytes"]])
    out = ROOT / "tests" / "data" / "training" / name
    losses = reference(ROOT / "tests" / "data" / "models" / name, tokens, s, out)[:2]
    (out / "trajectory.json").write_text(json.dumps(
        {"model": name, "data": "models/kjv/heldout.txt", "settings": s, "losses": losses[0],
         "grad_norms": losses[1]}, indent=2) + "\n")
    print(f"{name}: losses {losses[0][0]:.6f} .. {losses[0][-1]:.6f}")


def reference(checkpoint, tokens, s, out, dtype=torch.float64, device="cpu", grads=True):
    """Writes out/grads.safetensors (the first step's gradients) and returns the losses and
    gradient norms of s["steps"] AdamW steps (none where s["steps"] is 0). float64 is the
    contract's reference; float32 (on a GPU with device="cuda") is what a PyTorch user trains
    with, for comparing loss curves."""
    config, stored = gpt2_ref.load_checkpoint(checkpoint)

    def fresh():
        return {k: v.to(device=device, dtype=dtype).clone().requires_grad_(True)
                for k, v in stored.items()}

    out.mkdir(parents=True, exist_ok=True)

    micro, sampling = s.get("grad_accum", 1), s.get("sampling", "sequential")

    def windows():
        return Windows(tokens, micro * s["batch"], s["ctx"], sampling, s.get("seed", 1))

    # The first step's gradients.
    if grads:
        params = fresh()
        rows, targets, _ = windows().next()
        accumulate(config, params, rows, targets, micro, dtype)
        gpt2_ref.write_safetensors(out / "grads.safetensors",
                                   {k: p.grad.to(device="cpu", dtype=torch.float32)
                                    for k, p in params.items()},
                                   {"source": "tools/reference/train_ref.py"})

    # AdamW steps from the checkpoint.
    params = fresh()
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=s["lr"], betas=(s["beta1"], s["beta2"]), eps=s["eps"])
    order, losses, norms, offsets = windows(), [], [], []
    for step in range(s["steps"]):
        for g in opt.param_groups:
            g["lr"] = learning_rate(s, step)
        rows, targets, at = order.next()
        opt.zero_grad()
        loss = accumulate(config, params, rows, targets, micro, dtype)
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), s["grad_clip"])
        opt.step()
        losses.append(loss)
        norms.append(float(norm))
        offsets.append(at)
    return losses, norms, offsets


def main(argv):
    """With no arguments, the suite's goldens. With --checkpoint, one model on the token ids of
    --ids (little-endian int32): OUT/grads.safetensors and OUT/trajectory.json (the losses)."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint")
    ap.add_argument("--ids")
    ap.add_argument("--out")
    ap.add_argument("--batch", type=int, default=SETTINGS["batch"])
    ap.add_argument("--ctx", type=int, default=SETTINGS["ctx"])
    ap.add_argument("--steps", type=int, default=SETTINGS["steps"])
    ap.add_argument("--lr", type=float, default=SETTINGS["lr"])
    ap.add_argument("--warmup", type=int, default=SETTINGS["warmup"])
    ap.add_argument("--lr-min", type=float, default=SETTINGS["lr_min"])
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-grads", action="store_true", help="the trajectory only")
    ap.add_argument("--sampling", choices=["sequential", "random"], default="sequential")
    ap.add_argument("--seed", type=int, default=1, help="random windows' generator state")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches of --batch a step")
    a = ap.parse_args(argv)
    torch.set_default_dtype(getattr(torch, a.dtype))
    if not a.checkpoint:
        for model in MODELS:
            run(model)
        return
    import struct
    raw = Path(a.ids).read_bytes()
    tokens = list(struct.unpack(f"<{len(raw) // 4}i", raw))
    s = dict(SETTINGS, batch=a.batch, ctx=a.ctx, steps=a.steps, lr=a.lr, warmup=a.warmup,
             lr_min=a.lr_min, sampling=a.sampling, seed=a.seed, grad_accum=a.grad_accum)
    out = Path(a.out)
    losses, norms, offsets = reference(Path(a.checkpoint), tokens, s, out,
                                       getattr(torch, a.dtype), a.device, not a.no_grads)
    traj = {"settings": s, "losses": losses, "grad_norms": norms}
    if a.sampling == "random":
        traj["offsets"] = offsets
    (out / "trajectory.json").write_text(json.dumps(traj, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
