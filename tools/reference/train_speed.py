"""PyTorch's CPU training speed on the shipped model's shape, for the README's comparison with
`gpt2vk train --bench` (same model, batch and context; float32; AdamW with the shipped model's
recipe: lr 2e-3, betas 0.9 and 0.99, decay 0.1 on matrices; clipping at 1.0).

    /usr/bin/python3 tools/reference/train_speed.py [B T STEPS THREADS]   # default 16 256 10 2

The model is tools/train_kjv/model.py's TinyGPT, the batched nn.Module that trained the shipped
model (the way one trains it in PyTorch), on the contract's data order over
models/kjv/heldout.txt. Prints the median step's tokens/s after a first, untimed one, in the
form `gpt2vk train --bench` prints its own.
"""
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "train_kjv"))
from model import GPTConfig, TinyGPT  # noqa: E402


def main():
    B, T, steps, threads = (int(a) for a in (sys.argv[1:] + ["16", "256", "10", "2"][len(sys.argv) - 1:]))
    if steps < 1 or threads < 1:
        sys.exit("train_speed: STEPS and THREADS must be at least 1")
    torch.set_num_threads(threads)
    torch.manual_seed(1337)
    model = TinyGPT(GPTConfig())
    data = torch.tensor(list((ROOT / "models" / "kjv" / "heldout.txt").read_bytes()))
    if len(data) < B * T + 1:
        sys.exit(f"train_speed: heldout.txt holds {len(data)} bytes, fewer than B * T + 1")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=2e-3, betas=(0.9, 0.99))
    pos = 0
    times = []
    for _ in range(steps + 1):
        if pos + B * T + 1 > len(data):
            pos = 0
        chunk = data[pos:pos + B * T + 1]
        x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
        pos += B * T
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x).view(B * T, -1), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - start)
    timed = sorted(times[1:])
    n = len(timed)
    median = timed[n // 2] if n % 2 else (timed[n // 2 - 1] + timed[n // 2]) / 2
    params = sum(p.numel() for p in model.parameters())
    print(f"pytorch {torch.__version__}, {threads} threads: {params} parameters, {B} x {T} tokens "
          f"per step: {B * T / median:.0f} tokens/s ({median * 1000:.1f} ms per step, the median of "
          f"{n} steps after the first)")


if __name__ == "__main__":
    main()
