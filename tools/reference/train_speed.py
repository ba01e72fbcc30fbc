"""PyTorch's CPU training speed on the shipped model's shape, for the README's comparison with
`gpt2vk train` (same model, batch and context; float32, AdamW, clipping at 1.0).

    /usr/bin/python3 tools/reference/train_speed.py [B T STEPS THREADS]   # default 4 64 20 2

The model is gpt2_ref.forward (one sequence at a time) under autograd, continuing models/kjv on
models/kjv/heldout.txt. Prints tokens/s over the steps after a first, untimed one.
"""
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt2_ref  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def main():
    B, T, steps, threads = (int(a) for a in (sys.argv[1:] + ["4", "64", "20", "2"][len(sys.argv) - 1:]))
    torch.set_num_threads(threads)
    config, tensors = gpt2_ref.load_checkpoint(ROOT / "models" / "kjv")
    params = {k: v.float().clone().requires_grad_(True) for k, v in tensors.items()}
    data = list((ROOT / "models" / "kjv" / "heldout.txt").read_bytes())
    opt = torch.optim.AdamW(list(params.values()), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)

    def step(pos):
        opt.zero_grad()
        loss = 0
        for b in range(B):
            ids = data[pos + b * T:pos + b * T + T]
            targets = torch.tensor(data[pos + b * T + 1:pos + b * T + T + 1])
            logits = gpt2_ref.forward(config, params, ids, dtype=torch.float32)
            loss = loss + torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
        (loss / (B * T)).backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()

    step(0)
    start = time.time()
    for s in range(steps):
        step(((s + 1) * B * T) % (len(data) - B * T - 1))
    took = time.time() - start
    print(f"pytorch {torch.__version__}, {threads} threads, {B} x {T}: "
          f"{steps * B * T / took:.0f} tokens/s ({took / steps * 1000:.1f} ms/step)")


if __name__ == "__main__":
    main()
