"""Re-derives every committed golden and cross-checks the reference against torch.nn modules.

    /usr/bin/python3 tools/reference/check_goldens.py [DIR]      (default tests/data/models)

For each model folder it
1. reads the committed checkpoint with gpt2_ref.load_checkpoint and checks that its weights are
   the ones make_goldens.py draws from the recorded seed (rounded for the fp16/bf16 copies);
2. recomputes every golden with gpt2_ref and compares it with the committed goldens.json,
   logits.bin and logits_f16w.bin (ids and greedy ids exactly; logits to 1e-6 of max(1, |x|),
   which rounding the same float64 value to fp32 on another BLAS would still meet);
3. rebuilds the model from torch.nn building blocks (nn.Embedding, nn.TransformerEncoderLayer,
   nn.MultiheadAttention, nn.LayerNorm, nn.Linear; torch's own GELU/ReLU and masks) and reports
   the largest difference from gpt2_ref.forward, and whether greedy decoding through those
   modules gives the committed greedy ids.
Exits non-zero if anything disagrees.
"""
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt2_ref as ref  # noqa: E402
import make_goldens as mk  # noqa: E402

F64 = torch.float64
MODULES_TOLERANCE = 1e-9  # float64 vs float64: only summation order differs


class AnnotatedLayerNorm(nn.Module):
    """The Annotated Transformer's LayerNorm, as published (a_2, b_2, std + eps)."""

    def __init__(self, weight, bias, eps):
        super().__init__()
        self.a_2, self.b_2, self.eps = nn.Parameter(weight), nn.Parameter(bias), eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


def annotated_positions(T, C):
    """The Annotated Transformer's PositionalEncoding table (exp/log form).  [T, C]"""
    pe = torch.zeros(T, C, dtype=F64)
    position = torch.arange(0, T, dtype=F64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, C, 2, dtype=F64) * -(math.log(10000.0) / C))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


class ModulesGPT(nn.Module):
    """The same model family assembled from torch.nn modules, weights copied in (Conv1D
    [in, out] weights transposed to nn.Linear's [out, in]); float64, sequence-first."""

    def __init__(self, config, tensors):
        super().__init__()
        s = self.s = ref.resolve(config)
        w = {k: v.to(F64) for k, v in tensors.items()}
        C, H = s.n_embd, s.n_head
        self.wte = nn.Embedding.from_pretrained(w["wte.weight"])
        if s.positions == "learned":
            self.wpe = nn.Embedding.from_pretrained(w["wpe.weight"])
        # nn.MultiheadAttention scales q.k by 1/sqrt(D); fold any other scale into q.
        q_factor = s.attention_scale * math.sqrt(C // H)
        self.blocks = nn.ModuleList()
        for i in range(s.n_layer):
            p = f"h.{i}."
            if s.attention_only:
                block = nn.MultiheadAttention(C, H, bias=s.attention_bias, dtype=F64)
                attn = block
            else:
                act = {"gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
                       "gelu_erf": "gelu", "relu": "relu"}[s.activation]
                block = nn.TransformerEncoderLayer(
                    C, H, dim_feedforward=s.n_inner, dropout=0.0, activation=act,
                    layer_norm_eps=s.eps, norm_first=s.pre_norm, dtype=F64)
                attn = block.self_attn
                self._copy(block.linear1, w, p + "mlp.c_fc")
                self._copy(block.linear2, w, p + "mlp.c_proj")
                block.norm1 = self._norm(w, p + "ln_1")
                block.norm2 = self._norm(w, p + "ln_2")
            with torch.no_grad():
                in_w = w[p + "attn.c_attn.weight"].T.clone()                 # [3C, C]
                in_w[:C] *= q_factor
                attn.in_proj_weight.copy_(in_w)
                if attn.in_proj_bias is not None:
                    in_b = w.get(p + "attn.c_attn.bias", torch.zeros(3 * C, dtype=F64)).clone()
                    in_b[:C] *= q_factor
                    attn.in_proj_bias.copy_(in_b)
            self._copy(attn.out_proj, w, p + "attn.c_proj")
            self.blocks.append(block)
        self.ln_f = self._norm(w, "ln_f") if s.final_norm else nn.Identity()
        self.head = nn.Linear(C, s.n_vocab, bias=False, dtype=F64)
        with torch.no_grad():
            self.head.weight.copy_(w["wte.weight"] if s.tied else w["lm_head.weight"])
        self.eval()

    @staticmethod
    def _copy(linear, w, name):  # a missing bias (the "no bias" variants) is zero
        with torch.no_grad():
            linear.weight.copy_(w[name + ".weight"].T)
            if linear.bias is not None:
                linear.bias.copy_(w.get(name + ".bias", torch.zeros_like(linear.bias)))

    def _norm(self, w, name):
        weight, bias = w[name + ".weight"].clone(), w[name + ".bias"].clone()
        if self.s.layer_norm == "std_plus_eps":
            return AnnotatedLayerNorm(weight, bias, self.s.eps)
        norm = nn.LayerNorm(self.s.n_embd, eps=self.s.eps, dtype=F64)
        with torch.no_grad():
            norm.weight.copy_(weight)
            norm.bias.copy_(bias)
        return norm

    @torch.no_grad()
    def forward(self, ids):  # [T] -> [T, V]
        T, s = len(ids), self.s
        ids = torch.as_tensor(ids)
        x = self.wte(ids)
        if s.positions == "learned":
            x = x + self.wpe(torch.arange(T))
        elif s.positions == "sinusoidal":
            x = x + annotated_positions(T, s.n_embd)
        x = x.unsqueeze(1)                                                   # [T, 1, C]
        mask = nn.Transformer.generate_square_subsequent_mask(T).to(F64) if s.causal else None
        for block in self.blocks:
            if s.attention_only:
                x = x + block(x, x, x, attn_mask=mask, need_weights=False)[0]
            else:
                x = block(x, src_mask=mask)
        return self.head(self.ln_f(x.squeeze(1)))


def modules_greedy(model, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(torch.argmax(model(ids)[-1])))
    return ids[len(prompt):]


def check_model(folder):
    """A list of failures for one model folder, and a line of cross-check figures."""
    fail = []
    config, tensors = ref.load_checkpoint(folder)
    gold = json.loads((folder / "goldens.json").read_text())

    stored = next(iter(tensors.values())).dtype
    drawn = mk.random_tensors(config, gold["seed"])
    if any(not torch.equal(drawn[k].to(stored), tensors[k]) for k in tensors):
        fail.append(f"weights are not make_goldens.random_tensors(seed {gold['seed']})")

    g = mk.compute(config, tensors)
    if gold["ids"] != ref.tokenize(config, gold["text"]) or gold["ids"] != g["ids"]:
        fail.append("ids do not tokenize text")
    if gold["greedy_prompt"] != ref.tokenize(config, gold["greedy_prompt_text"]):
        fail.append("greedy_prompt does not tokenize greedy_prompt_text")
    for key, want in (("logits_f32", g["logits"]), ("logits_f16_weights", g["logits_f16"])):
        got = np.fromfile(folder / gold[key], dtype="<f4")
        want = want.to(torch.float32).numpy().reshape(-1)
        if list(want.shape) != [math.prod(gold["logits_shape"])] or got.shape != want.shape:
            fail.append(f"{key}: size {got.shape} / shape {gold['logits_shape']}")
            continue
        err = np.abs(got.astype(np.float64) - want) / np.maximum(1.0, np.abs(want))
        if err.max() > 1e-6:
            fail.append(f"{key}: relative error {err.max():.3g}")
    for key, mine in (("greedy_ids", "greedy"), ("greedy_ids_f16_weights", "greedy_f16")):
        if gold[key] != g[mine]:
            fail.append(f"{key} differ: {gold[key]} vs {g[mine]}")
    for key, mine in (("greedy_margins", "margins"), ("greedy_margins_f16_weights", "margins_f16")):
        if not np.allclose(gold[key], g[mine], rtol=1e-3, atol=1e-6):
            fail.append(f"{key} differ")
    for key, value in (("mean_nll", g["nll"]), ("mean_nll_f16_weights", g["nll_f16"]),
                       ("perplexity", math.exp(g["nll"]))):
        if not math.isclose(gold[key], value, rel_tol=1e-9):
            fail.append(f"{key}: {gold[key]} vs {value}")
    fail += mk.problems(g)

    # The torch.nn rebuild, on the fixed ids and on the whole greedy sequence.
    model, model_f16 = ModulesGPT(config, tensors), ModulesGPT(config, ref.round_weights(tensors))
    sequence = gold["greedy_prompt"] + gold["greedy_ids"][:-1]
    diff = max(float((model(ids) - ref.forward(config, tensors, ids)).abs().max())
               for ids in (gold["ids"], sequence))
    if diff > MODULES_TOLERANCE:
        fail.append(f"torch.nn rebuild differs from gpt2_ref.forward by {diff:.3g}")
    same = modules_greedy(model, gold["greedy_prompt"], mk.N_GREEDY) == gold["greedy_ids"]
    same_f16 = (modules_greedy(model_f16, gold["greedy_prompt"], mk.N_GREEDY)
                == gold["greedy_ids_f16_weights"])
    verdict = "match" if same and same_f16 else "DIFFER"
    if verdict != "match":
        fail.append("greedy through the torch.nn rebuild gives other ids")
    return fail, f"torch.nn max |diff| {diff:.2e}, greedy ids {verdict}"


def main():
    torch.set_num_threads(1)
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else mk.ROOT / "tests" / "data" / "models"
    folders = sorted(p.parent for p in root.glob("*/goldens.json"))
    failures = 0
    for folder in folders:
        fail, figures = check_model(folder)
        print(f"{folder.name:15} {'ok  ' if not fail else 'FAIL'} {figures}")
        for f in fail:
            print(f"    {f}")
        failures += bool(fail)
    print(f"{len(folders)} models, {failures} failing")
    sys.exit(1 if failures or not folders else 0)


if __name__ == "__main__":
    main()
