"""One training step of `gpt2vk train`, checked as a user would check it: a random GPT-2-layout
checkpoint of the given shape, one SGD step with --lr 100 and no decay or clipping, the gradient
read back as (w0 - w1) / 100 from the checkpoint it writes, against the float64 autograd gradient
of the same loss on the same first batch (gpt2_ref.forward, the contract's unshuffled loader).
Prints each shape's worst tensor: its largest error over its largest gradient (fp32 on the
device: about 1e-5 is right; issue 34's bug gave 0.3 to 0.95).

    python3 tools/reference/grad_check.py --gpt2vk build/gpt2vk --data models/kjv/heldout.txt \\
        --shape 128,4,2,50257,tied --batch 4 --ctx 64 [--kernels gpu|cpu|auto]

--shape is n_embd,n_head,n_layer,vocab,tied|untied; a vocabulary of 256 is bytes, 50257 GPT-2's
BPE (data/gpt2's files are copied beside the checkpoint). Exit status 1 when a tensor is off by
more than --tolerance (default 2e-3, the contract's bound).
"""
import argparse
import json
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt2_ref  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def random_checkpoint(folder, C, H, L, V, tied, seed):
    """GPT-2's initialisation (N(0, 0.02)), LayerNorm gains around 1 and small biases."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "gpt2", "n_embd": C, "n_head": H, "n_layer": L, "vocab_size": V,
              "n_positions": 1024, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-5, "tie_word_embeddings": tied}
    if V == 256:
        config["tokenizer"] = "bytes"
    (folder / "config.json").write_text(json.dumps(config))
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in gpt2_ref.expected_shapes(config).items():
        noise = torch.randn(shape, generator=g, dtype=torch.float64)
        if name.endswith(("ln_1.weight", "ln_2.weight")) or name == "ln_f.weight":
            tensors[name] = 1 + 0.1 * noise
        else:
            tensors[name] = 0.02 * noise
    gpt2_ref.write_safetensors(folder / "model.safetensors",
                               {k: v.float() for k, v in tensors.items()})
    if V != 256:
        for f in ("vocab.json", "merges.txt"):
            shutil.copy(ROOT / "data" / "gpt2" / f, folder)


def check(gpt2vk, data, shape, B, T, kernels, tmp):
    C, H, L, V, tied = shape
    model, out = tmp / "model", tmp / "out"
    random_checkpoint(model, C, H, L, V, tied, seed=C * 7 + H * 3 + L + V)
    lr = 100.0
    r = subprocess.run([gpt2vk, "train", "-m", str(model), "--data", str(data), "--steps", "1",
                        "--optimizer", "sgd", "--lr", str(lr), "--weight-decay", "0",
                        "--grad-clip", "0", "--batch", str(B), "--ctx", str(T), "-o", str(out),
                        "--kernels", kernels], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"gpt2vk train failed ({r.returncode}): {r.stderr}")
    subprocess.run([gpt2vk, "tokenize", "-m", str(model), "-f", str(data), "-o",
                    str(tmp / "ids.bin")], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    raw = (tmp / "ids.bin").read_bytes()
    ids = list(struct.unpack(f"<{len(raw) // 4}i", raw))
    config, w0 = gpt2_ref.load_checkpoint(model)
    _, w1 = gpt2_ref.load_checkpoint(out)
    params = {k: v.to(torch.float64).clone().requires_grad_(True) for k, v in w0.items()}
    chunk = ids[:B * T + 1]
    total = 0
    for b in range(B):
        logits = gpt2_ref.forward(config, params, chunk[b * T:b * T + T])
        total = total + torch.nn.functional.cross_entropy(
            logits, torch.tensor(chunk[b * T + 1:b * T + T + 1]), reduction="sum")
    (total / (B * T)).backward()
    worst, where = 0.0, ""
    for k, p in params.items():
        ours = (w0[k].double() - w1[k].double()) / lr
        err = (ours - p.grad).abs().max().item() / max(p.grad.abs().max().item(), 1e-30)
        if err > worst:
            worst, where = err, k
    return worst, where


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpt2vk", default=str(ROOT / "build" / "gpt2vk"))
    ap.add_argument("--data", default=str(ROOT / "models" / "kjv" / "heldout.txt"))
    ap.add_argument("--shape", action="append", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--kernels", default="auto")
    ap.add_argument("--tolerance", type=float, default=2e-3)
    a = ap.parse_args()
    failed = 0
    for text in a.shape:
        C, H, L, V, tied = text.split(",")
        shape = (int(C), int(H), int(L), int(V), tied == "tied")
        with tempfile.TemporaryDirectory() as tmp:
            worst, where = check(a.gpt2vk, a.data, shape, a.batch, a.ctx, a.kernels, Path(tmp))
        ok = worst <= a.tolerance
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {text} {a.batch}x{a.ctx} kernels={a.kernels}: "
              f"worst {worst:.3e} ({where})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
