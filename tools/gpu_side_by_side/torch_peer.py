"""The peer of `gpt2vk bench` on the same GPU: Hugging Face transformers' GPT-2 in PyTorch, fp16.

The same tests as bench, measured the way bench measures them:
  ppN   one forward over N random prompt tokens from an empty cache, reading back the top-1 of
        the last position (logits_to_keep=1 where the library has it), synchronised;
  tgN   one token of prompt, then N greedy tokens through model.generate (what a user runs),
        tokens/s over the whole call (the 1-token prefill included, as is bench's first step).
  train one AdamW step of batch x ctx tokens (mode train): forward, backward, gradient clipping
        to 1.0, the update; fp32 weights without TF32, as gpt2vk train (or, with --amp bf16,
        the forward and backward under torch.autocast in bfloat16, the weights and the update
        still fp32: what a PyTorch user trains with); the median of the steps after the first
        two, the peak memory PyTorch allocated, and the model FLOPs of a token (6 N + 12 L C T,
        N the parameters in matmuls: the tied head counted, the position table not).
Modes: eager (the default dynamic cache), static (cache_implementation="static", not compiled),
compiled (static cache and torch.compile through generate's own compile path; the first call
compiles and is reported apart). One JSON object per test on stdout.

    python3 torch_peer.py --shape small --mode eager [--pp 128,512] [--tg 128] [-r 5]
"""
import argparse
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

SHAPES = {"small": (768, 12, 12), "medium": (1024, 24, 16), "large": (1280, 36, 20),
          "xl": (1600, 48, 25)}


def sync():
    torch.cuda.synchronize()


def make_model(shape, half=True):
    n_embd, n_layer, n_head = SHAPES[shape]
    cfg = GPT2Config(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_positions=1024,
                     vocab_size=50257, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = GPT2LMHeadModel(cfg)
    return model.half().eval() if half else model.train()


def time_pp(model, n, repeats):
    ids = torch.randint(0, 50257, (1, n), device="cuda")

    def once():
        try:
            out = model(ids, use_cache=False, logits_to_keep=1)
        except TypeError:
            out = model(ids, use_cache=False)
        out.logits[:, -1].argmax(-1).item()

    with torch.inference_mode():
        once()
        once()
        sync()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            once()
            sync()
            samples.append(n / (time.perf_counter() - t0))
    return samples


def time_tg(model, n, repeats, mode):
    ids = torch.randint(0, 50257, (1, 1), device="cuda")
    kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0,
              eos_token_id=None)
    if mode in ("static", "compiled"):
        kw["cache_implementation"] = "static"
    if mode != "compiled":
        kw["disable_compile"] = True

    def once(k=n):
        kk = dict(kw, max_new_tokens=k, min_new_tokens=k)
        out = model.generate(ids, **kk)
        sync()
        assert out.shape[1] == 1 + k, out.shape

    with torch.inference_mode():
        t0 = time.perf_counter()
        once()  # the first call: compiles where the mode compiles
        first = time.perf_counter() - t0
        once()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            once()
            samples.append(n / (time.perf_counter() - t0))
    return samples, first


def time_train(model, batch, ctx, steps, amp=None):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    ids = torch.randint(0, 50257, (batch, ctx), device="cuda")
    samples = []
    torch.cuda.reset_peak_memory_stats()
    for i in range(steps):
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        sync()
        if i >= 2:
            samples.append(batch * ctx / (time.perf_counter() - t0))
    return samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--mode", default="eager", choices=["eager", "static", "compiled", "train"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--pp", default="128,512")
    ap.add_argument("--tg", default="128")
    ap.add_argument("-r", "--repeats", type=int, default=5)
    ap.add_argument("--amp", choices=["bf16"], help="train: autocast the forward and backward")
    a = ap.parse_args()
    model = make_model(a.shape, half=a.mode != "train")
    base = {"engine": "pytorch", "torch": torch.__version__,
            "transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(),
            "shape": a.shape, "mode": a.mode, "attn": model.config._attn_implementation}
    if a.mode == "train":
        torch.backends.cuda.matmul.allow_tf32 = False
        rec = dict(base, test=f"train {a.batch}x{a.ctx}", amp=a.amp or "none")
        s = time_train(model, a.batch, a.ctx, a.repeats + 2, a.amp)
        cfg = model.config
        n_matmul = sum(p.numel() for p in model.parameters()) - cfg.n_positions * cfg.n_embd
        flops = 6 * n_matmul + 12 * cfg.n_layer * cfg.n_embd * a.ctx
        rec.update(median_ts=statistics.median(s), min_ts=min(s), max_ts=max(s), runs=len(s),
                   peak_mib=round(torch.cuda.max_memory_allocated() / 2**20),
                   flops_per_token=flops)
        print(json.dumps(rec), flush=True)
        return 0
    tests = [("pp", int(x)) for x in a.pp.split(",") if x and x != "0"]
    tests += [("tg", int(x)) for x in a.tg.split(",") if x and x != "0"]
    for kind, n in tests:
        rec = dict(base, test=f"{kind}{n}")
        try:
            if kind == "pp":
                s = time_pp(model, n, a.repeats)
            else:
                s, first = time_tg(model, n, a.repeats, a.mode)
                rec["first_call_s"] = round(first, 3)
            rec.update(median_ts=statistics.median(s), min_ts=min(s), max_ts=max(s), runs=len(s))
        except Exception as e:  # noqa: BLE001 - report and go on to the next test
            rec["error"] = f"{type(e).__name__}: {e}"[:500]
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    sys.exit(main())
