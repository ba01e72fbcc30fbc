#!/usr/bin/python3
"""Trains TinyGPT (model.py) on the KJV bytes and exports it to models/kjv/.

Run with Debian's torch (/usr/bin/python3, not a pyenv python):
  /usr/bin/python3 tools/train_kjv/extract_kjv.py
  /usr/bin/python3 tools/train_kjv/train.py            # defaults = the shipped model
Everything is seeded (--seed): the init, the batch positions, and so the run, up to the
nondeterminism of float summation order in the BLAS threads. A checkpoint with the optimizer
state goes to runs/kjv.pt every --ckpt-every steps and at the end; --resume continues one.
At the end the model is exported (export.py), re-read from the exported safetensors by
sample.py's independent forward, and both forwards' held-out losses are printed side by side.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
from model import GPTConfig, TinyGPT  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description="train the byte-level KJV TinyGPT")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=256, help="context length = n_positions")
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    ap.add_argument("--min-lr", type=float, default=2e-4, help="end of the cosine decay")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1, help="matrices only")
    ap.add_argument("--clip", type=float, default=1.0, help="gradient norm clip")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--ckpt-every", type=int, default=250)
    ap.add_argument("--ckpt", default=os.path.join(data.HERE, "runs", "kjv.pt"))
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--out", default=os.path.join(data.HERE, "..", "..", "models", "kjv"))
    ap.add_argument("--no-export", action="store_true")
    return ap.parse_args()


def lr_at(step, args):
    """Linear warmup, then cosine decay from lr to min_lr at the last step."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * t))


def make_optimizer(model, args):
    # Decay the matrices (embeddings included), not the LayerNorm gains or the biases.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.99), eps=1e-8)


@torch.no_grad()
def quick_eval(model, held, ctx, n=64):
    """Mean loss over n fixed, evenly spaced held-out windows (a cheap progress signal)."""
    model.eval()
    starts = torch.linspace(0, len(held) - ctx - 2, n).long()
    xy = torch.stack([held[s:s + ctx + 1] for s in starts])
    loss = F.cross_entropy(model(xy[:, :-1]).reshape(-1, 256), xy[:, 1:].reshape(-1))
    model.train()
    return loss.item()


def save(path, model, opt, step, args, cfg, train_s):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "args": vars(args), "cfg": vars(cfg), "train_s": train_s,
                "rng": torch.get_rng_state()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def train(args):
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    train_b, held_b = data.split()
    train_t = torch.frombuffer(bytearray(train_b), dtype=torch.uint8).long()
    held_t = torch.frombuffer(bytearray(held_b), dtype=torch.uint8).long()
    print(f"train {len(train_b)} bytes, held out {len(held_b)} bytes", flush=True)

    cfg = GPTConfig(n_ctx=args.ctx, n_embd=args.n_embd, n_layer=args.n_layer, n_head=args.n_head)
    model = TinyGPT(cfg)
    opt = make_optimizer(model, args)
    step, train_s = 0, 0.0
    gen = torch.Generator().manual_seed(args.seed)
    if args.resume:
        ck = torch.load(args.ckpt)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, train_s = ck["step"], ck["train_s"]
        gen.manual_seed(args.seed + step)  # a fresh but reproducible batch stream
        print(f"resumed {args.ckpt} at step {step}", flush=True)
    print(f"params {sum(p.numel() for p in model.parameters())}, {vars(cfg)}", flush=True)

    model.train()
    t0, loss_acc, n_acc = time.time(), 0.0, 0
    while step < args.steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        starts = torch.randint(0, len(train_t) - args.ctx - 1, (args.batch,), generator=gen)
        xy = torch.stack([train_t[s:s + args.ctx + 1] for s in starts])  # [B, T+1]
        logits = model(xy[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 256), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        loss_acc, n_acc = loss_acc + loss.item(), n_acc + 1
        if step % args.log_every == 0 or step == args.steps:
            el = train_s + time.time() - t0
            print(f"step {step:5d}/{args.steps} loss {loss_acc / n_acc:.4f} lr {lr_at(step - 1, args):.2e} "
                  f"gnorm {gnorm:.2f} {el / 60:.1f} min", flush=True)
            loss_acc, n_acc = 0.0, 0
        if step % args.eval_every == 0 or step == args.steps:
            print(f"step {step:5d} held-out loss (64 windows) {quick_eval(model, held_t, args.ctx):.4f}",
                  flush=True)
        if step % args.ckpt_every == 0 or step == args.steps:
            save(args.ckpt, model, opt, step, args, cfg, train_s + time.time() - t0)
    train_s += time.time() - t0
    print(f"trained {step} steps in {train_s / 60:.1f} min", flush=True)
    return model, cfg, train_s


def main():
    args = parse_args()
    model, cfg, train_s = train(args)
    if args.no_export:
        return
    import export  # late: training does not depend on it
    import sample
    out = os.path.abspath(args.out)
    export.export(model.state_dict(), cfg, out)
    summary = sample.evaluate(out, data.split()[1], data.heldout_file_text(), data.train_probe(),
                              reference=model)
    summary.update({"steps": args.steps, "train_minutes": round(train_s / 60, 1)})
    print(json.dumps(summary, indent=1), flush=True)
    with open(os.path.join(os.path.dirname(args.ckpt), "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
