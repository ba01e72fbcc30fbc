#!/usr/bin/python3
"""Exports a TinyGPT state_dict to a Hugging Face GPT-2 style folder the engine reads.

Writes <out>/config.json and <out>/model.safetensors (fp32, written by hand: 8-byte
little-endian header length, JSON header {name: {dtype, shape, data_offsets}}, raw
little-endian data). Names and orientation are GPT-2's: Conv1D weights are [in, out] (y = x W),
so nn.Linear's [out, in] weights are transposed. There is no c_attn/c_proj bias (bias-free
attention) and no lm_head.weight (the head is tied to wte).

Usage: /usr/bin/python3 tools/train_kjv/export.py [--ckpt runs/kjv.pt] [--out models/kjv]
"""
import argparse
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GPTConfig  # noqa: E402


def config_json(cfg):
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.n_ctx,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": 4 * cfg.n_embd,
        "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu",  # exact erf GELU
        "tie_word_embeddings": True,
        "attention_bias": False,
        "mlp_bias": True,
        "tokenizer": "bytes",
        "norm_position": "pre",
        "final_norm": True,
        "position_embedding": "learned",
        "causal": True,
    }


def gpt2_tensors(sd, cfg):
    """[(name, fp32 tensor)] in GPT-2's order and orientation."""
    out = [("wte.weight", sd["wte.weight"]), ("wpe.weight", sd["wpe.weight"])]
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        out += [
            (p + "ln_1.weight", sd[p + "ln_1.weight"]),
            (p + "ln_1.bias", sd[p + "ln_1.bias"]),
            (p + "attn.c_attn.weight", sd[p + "attn.c_attn.weight"].t()),  # [C, 3C]
            (p + "attn.c_proj.weight", sd[p + "attn.c_proj.weight"].t()),  # [C, C]
            (p + "ln_2.weight", sd[p + "ln_2.weight"]),
            (p + "ln_2.bias", sd[p + "ln_2.bias"]),
            (p + "mlp.c_fc.weight", sd[p + "mlp.c_fc.weight"].t()),  # [C, 4C]
            (p + "mlp.c_fc.bias", sd[p + "mlp.c_fc.bias"]),  # [4C]
            (p + "mlp.c_proj.weight", sd[p + "mlp.c_proj.weight"].t()),  # [4C, C]
            (p + "mlp.c_proj.bias", sd[p + "mlp.c_proj.bias"]),  # [C]
        ]
    out += [("ln_f.weight", sd["ln_f.weight"]), ("ln_f.bias", sd["ln_f.bias"])]
    unused = set(sd) - {n for n, _ in out}
    if unused:
        raise SystemExit(f"export: state_dict has tensors the export does not place: {sorted(unused)}")
    return [(n, t.detach().to(torch.float32).contiguous()) for n, t in out]


def write_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors:
        blob = t.numpy().astype("<f4", copy=False).tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)  # spaces keep the data 8-byte aligned, as the spec allows
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def export(state_dict, cfg, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config_json(cfg), f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), gpt2_tensors(state_dict, cfg),
                      {"format": "pt"})
    print(f"exported {out_dir}/config.json and model.safetensors", flush=True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="export a train.py checkpoint to models/kjv")
    ap.add_argument("--ckpt", default=os.path.join(here, "runs", "kjv.pt"))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "models", "kjv"))
    args = ap.parse_args()
    ck = torch.load(args.ckpt, map_location="cpu")
    export(ck["model"], GPTConfig(**ck["cfg"]), os.path.abspath(args.out))


if __name__ == "__main__":
    main()
