"""Builds the small random checkpoints under tests/data/models and their goldens.

    /usr/bin/python3 tools/reference/make_goldens.py [--out DIR] [--only NAME ...]

Each model gets a folder with config.json, model.safetensors, goldens.json, logits.bin and
logits_f16w.bin (tests/data/models/README.md says what every key means). Weights come from a
seeded torch generator; for each model the first seed from its base seed whose greedy
continuations are diverse and never close to a tie is taken (see `acceptable`), so the output
is the same on every run. Everything is computed in float64 by gpt2_ref.forward.
"""
import argparse
import itertools
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt2_ref as ref  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Hello, Vulkan GPT-2!"  # the fixed "ids" (20 bytes)
PROMPT = "Hello"               # the greedy prompt
CHARS = "\n !,.dehlorw"        # the "chars" model's 12 tokens
CHARS_TEXT, CHARS_PROMPT = "hello world, hello.\n", "hel"
N_GREEDY = 32
MIN_MARGIN = 2e-3   # every greedy step's top-2 logit gap, so fp32 engines can match exactly
MIN_DISTINCT = 8    # distinct ids among the 32 greedy ids
MAX_RUN = 4         # longest run of one repeated id
SEED_TRIES = 200

# GPT-2's keys with tiny sizes; "n_inner": null as in Hugging Face's own gpt2 config.json.
BASE = {"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, "n_embd": 32, "n_layer": 2,
        "n_head": 4, "n_inner": None, "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new", "tie_word_embeddings": True, "tokenizer": "bytes"}

# Every project key written out with its GPT-2 default, so one model spells them all.
EXPLICIT_DEFAULTS = {"norm_position": "pre", "final_norm": True, "position_embedding": "learned",
                     "attention_bias": True, "mlp_bias": True, "causal": True,
                     "layer_norm_formula": "standard", "attention_only": False}

# (folder, config changes from BASE, base seed, what it is)
MODELS = [
    ("gpt2-tiny", {}, 100, "the exact GPT-2 block: pre-norm, learned positions, gelu_new, "
     "biases, tied head, causal; only Hugging Face keys in config.json"),
    ("post-norm", {"norm_position": "post"}, 200, "Add & Norm after each sub-layer (2017)"),
    ("no-final-norm", {"final_norm": False}, 300, "no ln_f before the head"),
    ("sinusoidal", {"position_embedding": "sinusoidal"}, 400,
     "fixed sin/cos positions, no wpe tensor"),
    ("no-position", {"position_embedding": "none"}, 500, "no position embedding at all"),
    ("gelu-erf", {"activation_function": "gelu"}, 600, "exact (erf) GELU"),
    ("relu", {"activation_function": "relu"}, 700, "ReLU MLP"),
    ("no-bias", {"attention_bias": False, "mlp_bias": False}, 800,
     "no c_attn / c_proj / c_fc / mlp.c_proj biases"),
    ("untied", {"tie_word_embeddings": False}, 900, "separate lm_head.weight [V, C]"),
    ("bidirectional", {"causal": False}, 1000, "every position attends to every position"),
    ("std-plus-eps", {"layer_norm_formula": "std_plus_eps", "layer_norm_epsilon": 1e-6}, 1100,
     "Annotated-Transformer LayerNorm: (x - mean) / (unbiased std + eps)"),
    ("attention-only", {"attention_only": True, "attention_scale": 2.0, "n_layer": 1}, 1200,
     "one block of x + attn(x) only (no ln_1/ln_2/MLP), q.k scaled by 2.0"),
    ("no-attn-scale", {"scale_attn_weights": False}, 1300,
     "Hugging Face scale_attn_weights: false (q.k not scaled)"),
    ("n-inner", {"n_embd": 48, "n_head": 3, "n_inner": 100}, 1400,
     "C = 48, 3 heads of 16, MLP width 100 (not 4C, not a multiple of C)"),
    ("one-head", {"n_head": 1}, 1500, "a single head of 32"),
    ("chars", {"tokenizer": "chars", "chars": CHARS, "vocab_size": len(CHARS)}, 1600,
     "12-character tokenizer from config.json"),
    ("tinygpt", {**EXPLICIT_DEFAULTS, "activation_function": "gelu", "attention_bias": False},
     1700, "pre-norm, erf GELU, no attention biases, MLP biases, tied; every project key "
     "written out"),
]
# Stored-dtype copies of gpt2-tiny's weights, rounded; the seed must suit them too.
DERIVED = {"gpt2-tiny": [("gpt2-tiny-f16", torch.float16), ("gpt2-tiny-bf16", torch.bfloat16)]}


def random_tensors(config, seed):
    """fp32 weights, larger than GPT-2's N(0, 0.02) so that tiny random models have varied
    logits: the sub-layer outputs (gain 3) outweigh the token's own embedding, which a tied
    head would otherwise echo back forever; positions (std 0.5) move every step."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in sorted(ref.expected_shapes(config).items()):
        def normal(std, mean=0.0):
            return torch.randn(shape, generator=gen, dtype=torch.float64) * std + mean
        if name in ("wte.weight", "lm_head.weight"):
            t = normal(0.3)
        elif name == "wpe.weight":
            t = normal(0.5)
        elif name.startswith("ln_") or ".ln_" in name:
            t = normal(0.1, 1.0) if name.endswith(".weight") else normal(0.05)
        elif name.endswith(".bias"):
            t = normal(0.05)
        elif "c_proj" in name:  # [in, out]: the projection back into the residual stream
            t = normal(3.0 / math.sqrt(shape[0]))
        else:
            t = normal(1.5 / math.sqrt(shape[0]))
        out[name] = t.to(torch.float32)
    return out


def text_and_prompt(config):
    if config["tokenizer"] == "chars":
        return CHARS_TEXT, CHARS_PROMPT
    return TEXT, PROMPT


def compute(config, tensors):
    """Every golden of one checkpoint (tensors as stored, any dtype)."""
    text, prompt_text = text_and_prompt(config)
    ids, prompt = ref.tokenize(config, text), ref.tokenize(config, prompt_text)
    f16 = ref.round_weights(tensors)  # fp16 matrices, fp32 vectors: the engine's fp16 storage
    # Every tensor rounded, vectors too: the greedy ids must not hang on that difference.
    f16_2d = {k: v.to(torch.float16).float() for k, v in tensors.items()}
    logits, logits_f16 = ref.forward(config, tensors, ids), ref.forward(config, f16, ids)
    greedy, margins = ref.greedy_with_margins(config, tensors, prompt, N_GREEDY)
    greedy_f16, margins_f16 = ref.greedy_with_margins(config, f16, prompt, N_GREEDY)
    greedy_f16_2d, margins_f16_2d = ref.greedy_with_margins(config, f16_2d, prompt, N_GREEDY)
    return {
        "text": text, "ids": ids, "logits": logits, "logits_f16": logits_f16,
        "prompt_text": prompt_text, "prompt": prompt,
        "greedy": greedy, "margins": margins, "greedy_f16": greedy_f16,
        "margins_f16": margins_f16, "greedy_f16_2d": greedy_f16_2d,
        "margins_f16_2d": margins_f16_2d,
        "nll": ref.mean_nll(logits, ids), "nll_f16": ref.mean_nll(logits_f16, ids)}


def problems(g):
    """Why these goldens would make a poor test, or [] when they are fine."""
    why = []
    least = min(g["margins"] + g["margins_f16"] + g["margins_f16_2d"])
    if least <= MIN_MARGIN:
        why.append(f"top-2 margin {least:.2g}")
    if g["greedy_f16_2d"] != g["greedy_f16"]:
        why.append("fp16 greedy ids depend on whether 1-D tensors are rounded")
    for key in ("greedy", "greedy_f16"):
        run = max(len(list(r)) for _, r in itertools.groupby(g[key]))
        if len(set(g[key])) < MIN_DISTINCT or run > MAX_RUN:
            why.append(f"{key}: {len(set(g[key]))} distinct ids, a run of {run}")
    return why


def choose(name, config, base_seed):
    """The first seed from base_seed whose model (and derived copies) passes `problems`."""
    for seed in range(base_seed, base_seed + SEED_TRIES):
        tensors = random_tensors(config, seed)
        versions = [(name, tensors)] + [
            (n, {k: v.to(dt) for k, v in tensors.items()}) for n, dt in DERIVED.get(name, [])]
        results = [(n, t, compute(config, t)) for n, t in versions]
        rejected = [f"{n}: {'; '.join(problems(g))}" for n, _, g in results if problems(g)]
        if not rejected:
            return seed, results
        print(f"  {name} seed {seed} rejected: {' | '.join(rejected)}")
    raise SystemExit(f"{name}: no acceptable seed in {SEED_TRIES} tries")


def write_goldens(folder, name, description, seed, g):
    def f32_file(file, logits):
        (folder / file).write_bytes(logits.to(torch.float32).contiguous().numpy().tobytes())
        return file

    def margins(m):
        return [float(f"{x:.4g}") for x in m]

    goldens = {
        "model": name, "description": description,
        "made_by": "/usr/bin/python3 tools/reference/make_goldens.py", "seed": seed,
        "text": g["text"], "ids": g["ids"],
        "logits_shape": list(g["logits"].shape),
        "logits_f32": f32_file("logits.bin", g["logits"]),
        "logits_f16_weights": f32_file("logits_f16w.bin", g["logits_f16"]),
        "greedy_prompt_text": g["prompt_text"], "greedy_prompt": g["prompt"],
        "greedy_ids": g["greedy"], "greedy_margins": margins(g["margins"]),
        "greedy_ids_f16_weights": g["greedy_f16"],
        "greedy_margins_f16_weights": margins(g["margins_f16"]),
        "mean_nll": g["nll"], "perplexity": math.exp(g["nll"]),
        "mean_nll_f16_weights": g["nll_f16"], "perplexity_f16_weights": math.exp(g["nll_f16"]),
    }
    # One key per line, lists kept on one line: readable in a diff.
    lines = [f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in goldens.items()]
    (folder / "goldens.json").write_text("{\n" + ",\n".join(lines) + "\n}\n")


def write_model(out, name, description, config, seed, tensors, g):
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    ref.write_safetensors(folder / "model.safetensors", tensors, {"format": "pt"})
    write_goldens(folder, name, description, seed, g)
    size = sum(f.stat().st_size for f in folder.iterdir())
    runs = max(len(list(r)) for _, r in itertools.groupby(g["greedy"]))
    print(f"{name:15} seed {seed:5}  {size / 1024:6.1f} KiB  nll {g['nll']:.3f}  "
          f"min margin {min(g['margins'] + g['margins_f16']):.4f}  "
          f"greedy: {len(set(g['greedy']))} distinct, longest run {runs}, "
          f"f16 ids {'=' if g['greedy_f16'] == g['greedy'] else '!='} f32 ids")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "models")
    parser.add_argument("--only", nargs="*", help="folder names to (re)build")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the machine is shared
    for name, changes, base_seed, description in MODELS:
        if args.only and name not in args.only:
            continue
        config = {**BASE, **changes}
        seed, results = choose(name, config, base_seed)
        for version, tensors, g in results:
            derived = f" ({name}'s weights stored as {next(iter(tensors.values())).dtype})"
            write_model(args.out, version, description + ("" if version == name else derived),
                        config, seed, tensors, g)


if __name__ == "__main__":
    main()
