"""T5 and Marian in float64, and Hugging Face's greedy and beam search, written from the published
definitions (transformers 5.x: modeling_t5, modeling_marian, generation/utils.py `_beam_search`
and the logits processors), reading a Hugging Face folder with gpt2_ref's safetensors reader.

    /usr/bin/python3 tools/reference/seq2seq_ref.py --check [DIR ...]  (default: tests/data/hf/{marian,t5-*})
    /usr/bin/python3 tools/reference/seq2seq_ref.py --write-goldens   (tests/data/beam/goldens.json)
    /usr/bin/python3 tools/reference/seq2seq_ref.py --write-dkv       (tests/data/t5-dkv/{narrow,wide})
    /usr/bin/python3 tools/reference/seq2seq_ref.py --bench-t5 DIR [--source 64 --new 64 --threads 2]
    /usr/bin/python3 tools/reference/seq2seq_ref.py --grads DIR BATCH.json OUT_DIR

--grads: the training step's contract for a Marian folder (tests/test_train_seq2seq.cpp): the
mean cross-entropy of the teacher-forced targets of BATCH.json ({"sources", "inputs", "targets"},
each [B, length] ids, and an optional "attention_mask" [B, S] of the sources, 1 = real, 0 =
padding; targets of -100 are padding, left out of the mean as transformers' labels are) and its
gradient, by autograd in float64, with respect to
every tensor of the folder. They go to OUT_DIR as a folder of the same config.json whose
model.safetensors holds the gradients (float32) under the tensors' own names, so that gpt2vk's
loader presents them under its canonical names as it does weights (every conversion it makes is
linear); the loss is printed as JSON. final_logits_bias is trained as gpt2vk trains it
(transformers keeps it a buffer); a tied head's gradient is the shared embedding's.

--check, for every fixture (tests/data/hf/README.md): the encoder's last hidden state and the
teacher-forced logits against what transformers saved in float64 (beyond 1e-9 of the row's scale
fails: float64 against float64 from the same weights, expect ~1e-15), and the greedy, beams4 and
beams4_ngram ids of expected.json exactly. Then Marian's encoder and decoder layers once against
torch.nn.TransformerEncoderLayer / TransformerDecoderLayer (post-LN, weights copied in, the
config's activation, no dropout, float64), the implementation nobody here wrote; and that
tests/data/beam/goldens.json is what --write-goldens would write now. It checks the folders of
tests/data/t5-dkv the same way (saved outputs against this reference, ids identical).

--write-dkv writes two T5 folders whose attention is not the model's width (d_kv x num_heads !=
d_model: t5-v1_1-small's and flan-t5-small's narrower, t5-3b's wider), random float32 weights in
transformers' names and layout, with this reference's float64 outputs and generated ids in the
fixtures' format (expected.safetensors, expected.json), for tests/test_seq2seq.cpp. No
transformers here: a folder saved by transformers itself with such a shape is
tools/reference/hf_fixtures.py's t5-narrow and t5-wide, for a machine that has it.

--write-goldens writes the toy beam-search cases that tests/test_beam.cpp runs through the C++
beam search (model/generation/beam.h): a seeded "decoder" whose logits are a fixed function of the
last two tokens and the length (toy_logits, written the same way in the C++ test), searched here
with every setting the C++ takes; the ids must agree exactly.

Beam search keeps HF's arithmetic (the -1e9 sentinels, the length penalty's length, the
finished-hypothesis merge) but in float64 where HF runs float32, and picks its top-k with a stable
sort (equal scores: the lower index first) where torch.topk leaves ties unordered, so that the
C++ can agree id for id. num_beams 1 is greedy search, as `generate` dispatches it.
"""
import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt2_ref import read_safetensors, write_safetensors  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = ROOT / "tests/data/beam/goldens.json"


# ---------------------------------------------------------------- shared pieces

def load(folder, dtype=torch.float64):
    """(config, generation config, {name: tensor}) of a Hugging Face folder, in float64 unless
    `dtype` says otherwise."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    gen_path = folder / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.exists() else {}
    raw, _ = read_safetensors(folder / "model.safetensors")
    return config, gen, {k: t.to(dtype) for k, t in raw.items()}


def linear(x, w, name):
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if name + ".bias" in w else y


def activation(x, kind):
    if kind in ("swish", "silu"):
        return x * torch.sigmoid(x)
    if kind == "gelu":  # erf
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    if kind in ("gelu_new", "gelu_pytorch_tanh"):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if kind == "relu":
        return torch.clamp(x, min=0)
    raise ValueError(f"activation {kind!r}")


def attention(xq, xkv, w, names, H, scale, bias):
    """Multi-head attention: xq [B, Tq, C], xkv [B, Tk, C]; names = (q, k, v, out) linears, q, k
    and v [C] -> [A] (T5's A = d_kv x num_heads, which need not be C), out [A] -> [C]; H heads of
    A / H; bias [B or 1, H or 1, Tq, Tk] added to the scores (masks, T5's position bias)."""
    B, Tq, _ = xq.shape
    Tk = xkv.shape[1]
    q, k, v = (linear(x, w, n) for x, n in ((xq, names[0]), (xkv, names[1]), (xkv, names[2])))
    D = q.shape[-1] // H
    heads = lambda y, T: y.view(B, T, H, D).transpose(1, 2)  # noqa: E731  [B, H, T, D]
    scores = heads(q, Tq) @ heads(k, Tk).transpose(-1, -2) * scale + bias
    ctx = (torch.softmax(scores, -1) @ heads(v, Tk)).transpose(1, 2).reshape(B, Tq, H * D)
    return linear(ctx, w, names[3])


def padding_bias(mask):
    """[B, S] 1 = real -> [B, 1, 1, S]: a padded key takes no weight."""
    return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(mask == 0, -math.inf)[:, None, None, :]


def causal_bias(T):
    return torch.full((T, T), -math.inf, dtype=torch.float64).triu(1)  # [T, T]


# ---------------------------------------------------------------- Marian (post-LN, BART family)

def layer_norm(x, w, name, eps=1e-5):  # nn.LayerNorm's default eps, as modeling_marian builds it
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]


def marian_positions(T, C):
    """[T, C] sinusoids, not interleaved: sin(pos / 10000^(2j/C)) in channels j < C/2, the cos of
    the same frequencies after. The model holds them as a float32 table (the module's weight,
    built in float64 and stored as float32) and the float64 run casts that table up: so here."""
    half = (C + 1) // 2
    j = torch.arange(half, dtype=torch.float64)
    angle = torch.arange(T, dtype=torch.float64)[:, None] / torch.pow(10000.0, 2 * j / C)[None, :]
    out = torch.cat([torch.sin(angle), torch.cos(angle[:, :C - half])], dim=1)
    return out.to(torch.float32).to(torch.float64)


def marian_embed(config, w, ids):
    scale = math.sqrt(config["d_model"]) if config.get("scale_embedding") else 1.0
    return w["model.shared.weight"][ids] * scale + marian_positions(ids.shape[1], config["d_model"])


def marian_encoder_layer(config, w, p, x, bias):
    """One post-LN encoder layer: [B, S, C] -> [B, S, C]."""
    H, act = config["encoder_attention_heads"], config["activation_function"]
    scale = (config["d_model"] // H) ** -0.5
    names = [p + "self_attn." + n for n in ("q_proj", "k_proj", "v_proj", "out_proj")]
    x = layer_norm(x + attention(x, x, w, names, H, scale, bias), w, p + "self_attn_layer_norm")
    ff = linear(activation(linear(x, w, p + "fc1"), act), w, p + "fc2")
    return layer_norm(x + ff, w, p + "final_layer_norm")


def marian_decoder_layer(config, w, p, y, enc, self_bias, cross_bias):
    """One post-LN decoder layer: y [B, T, C] with the encoder's enc [B, S, C] -> [B, T, C]."""
    H, act = config["decoder_attention_heads"], config["activation_function"]
    scale = (config["d_model"] // H) ** -0.5
    names = lambda m: [p + m + "." + n for n in ("q_proj", "k_proj", "v_proj", "out_proj")]  # noqa: E731
    y = layer_norm(y + attention(y, y, w, names("self_attn"), H, scale, self_bias), w,
                   p + "self_attn_layer_norm")
    y = layer_norm(y + attention(y, enc, w, names("encoder_attn"), H, scale, cross_bias), w,
                   p + "encoder_attn_layer_norm")
    ff = linear(activation(linear(y, w, p + "fc1"), act), w, p + "fc2")
    return layer_norm(y + ff, w, p + "final_layer_norm")


def marian_encode(config, w, ids, mask):
    x = marian_embed(config, w, ids)
    for i in range(config["encoder_layers"]):
        x = marian_encoder_layer(config, w, f"model.encoder.layers.{i}.", x, padding_bias(mask))
    return x  # Marian's encoder has no final norm


def marian_logits(config, w, enc, mask, dec):
    """[B, T, V] logits of decoder ids dec [B, T] over the encoder's output enc [B, S, C]."""
    y = marian_embed(config, w, dec)
    for i in range(config["decoder_layers"]):
        y = marian_decoder_layer(config, w, f"model.decoder.layers.{i}.", y, enc,
                                 causal_bias(dec.shape[1]), padding_bias(mask))
    head = w.get("lm_head.weight", w["model.shared.weight"])  # tied unless the file has its own
    return y @ head.T + w["final_logits_bias"][0]


def marian_grads(folder, batch_path, out_dir):
    """--grads: writes out_dir/{config.json, model.safetensors}; returns the loss."""
    config, _, w = load(folder)
    if config.get("tie_word_embeddings", True):
        w.pop("lm_head.weight", None)  # the head reads model.shared.weight: one tensor, one gradient
    batch = json.loads(Path(batch_path).read_text())
    src, inp, tgt = (torch.tensor(batch[k], dtype=torch.long) for k in ("sources", "inputs", "targets"))
    for t in w.values():
        t.requires_grad_(True)
    mask = torch.tensor(batch["attention_mask"]) if "attention_mask" in batch else torch.ones_like(src)
    logits = marian_logits(config, w, marian_encode(config, w, src, mask), mask, inp)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)
    loss.backward()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config))
    grads = {k: (t.grad if t.grad is not None else torch.zeros_like(t)).detach().to(torch.float32)
             for k, t in w.items()}
    write_safetensors(out / "model.safetensors", grads)
    return loss.item()


# ---------------------------------------------------------------- T5 (pre-RMSNorm, relative bias)

def rms_norm(x, w, name, eps):
    """T5LayerNorm: no mean, no bias. transformers takes the mean square in float32 whatever the
    model's dtype (so its float64 run of the fixtures has float32 norms): kept, to agree with
    those fixtures to float64's precision; the scale then multiplies the float64 row."""
    ms = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(ms + eps) * w[name + ".weight"]


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """T5's bucket of relative position rel = key - query (an int tensor): exact below half the
    buckets (of a direction), logarithmic up to max_distance, saturated after. The log runs in
    float32 as transformers runs it, so that the edges fall where they fall there."""
    bucket = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        bucket += (rel > 0).long() * num_buckets
        n = rel.abs()
    else:
        n = (-rel).clamp(min=0)
    exact = num_buckets // 2
    large = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact)
                     * (num_buckets - exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(n < exact, n, large)


def t5_position_bias(config, w, stack, Tq, Tk, bidirectional):
    """[1, H, Tq, Tk] from block 0's table, shared by every layer of the stack."""
    rel = torch.arange(Tk)[None, :] - torch.arange(Tq)[:, None]
    b = t5_bucket(rel, bidirectional, config["relative_attention_num_buckets"],
                  config["relative_attention_max_distance"])
    table = w[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]  # [buckets, H]
    return table[b].permute(2, 0, 1)[None]


def t5_ff(config, w, p, x):
    act = config.get("dense_act_fn") or config["feed_forward_proj"].split("-")[-1]
    if config["feed_forward_proj"] == "gated-gelu":
        act = "gelu_new"  # transformers' own reading of the name
    if p + "DenseReluDense.wi_0.weight" in w:  # gated: act(wi_0 x) * wi_1 x
        h = activation(linear(x, w, p + "DenseReluDense.wi_0"), act) * linear(x, w, p + "DenseReluDense.wi_1")
    else:
        h = activation(linear(x, w, p + "DenseReluDense.wi"), act)
    return linear(h, w, p + "DenseReluDense.wo")


def t5_attn_names(p, module):
    return [p + module + "." + n for n in ("q", "k", "v", "o")]


def t5_encode(config, w, ids, mask):
    eps, H = config["layer_norm_epsilon"], config["num_heads"]
    x = w["shared.weight"][ids]
    S = ids.shape[1]
    bias = t5_position_bias(config, w, "encoder", S, S, True) + padding_bias(mask)
    for i in range(config["num_layers"]):
        p = f"encoder.block.{i}."
        h = rms_norm(x, w, p + "layer.0.layer_norm", eps)
        x = x + attention(h, h, w, t5_attn_names(p + "layer.0.", "SelfAttention"), H, 1.0, bias)
        x = x + t5_ff(config, w, p + "layer.1.", rms_norm(x, w, p + "layer.1.layer_norm", eps))
    return rms_norm(x, w, "encoder.final_layer_norm", eps)


def t5_logits(config, w, enc, mask, dec):
    eps, H, T = config["layer_norm_epsilon"], config["num_heads"], dec.shape[1]
    y = w["shared.weight"][dec]
    self_bias = t5_position_bias(config, w, "decoder", T, T, False) + causal_bias(T)
    cross_bias = padding_bias(mask)  # the cross-attention has no position bias
    for i in range(config.get("num_decoder_layers") or config["num_layers"]):
        p = f"decoder.block.{i}."
        h = rms_norm(y, w, p + "layer.0.layer_norm", eps)
        y = y + attention(h, h, w, t5_attn_names(p + "layer.0.", "SelfAttention"), H, 1.0, self_bias)
        h = rms_norm(y, w, p + "layer.1.layer_norm", eps)
        y = y + attention(h, enc, w, t5_attn_names(p + "layer.1.", "EncDecAttention"), H, 1.0, cross_bias)
        y = y + t5_ff(config, w, p + "layer.2.", rms_norm(y, w, p + "layer.2.layer_norm", eps))
    y = rms_norm(y, w, "decoder.final_layer_norm", eps)
    # transformers 5.17 saves `scale_decoder_outputs` (and now always ties the head); configs
    # from before read the scale off `tie_word_embeddings`: a tied head sees d_model^-0.5.
    scale = config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True))
    if scale:
        y = y * config["d_model"] ** -0.5
    return y @ w.get("lm_head.weight", w["shared.weight"]).T


class Seq2Seq:
    """A fixture's model: encode(ids, mask) -> [B, S, C]; logits(enc, mask, dec) -> [B, T, V]."""

    def __init__(self, folder):
        self.config, self.gen, self.w = load(folder)
        t5 = self.config["model_type"] == "t5"
        self._encode, self._logits = (t5_encode, t5_logits) if t5 else (marian_encode, marian_logits)

    def encode(self, ids, mask):
        return self._encode(self.config, self.w, ids, mask)

    def logits(self, enc, mask, dec):
        return self._logits(self.config, self.w, enc, mask, dec)


# ---------------------------------------------------------------- T5 greedy in float32 with caches

def t5_bench(folder, source_len, new_tokens, threads):
    """The peer of `gpt2vk seq2seq` on a T5 folder: float32, `threads` threads, a random source of
    source_len ids encoded once, then new_tokens greedy steps (no eos stop), each one token
    through the decoder with its self-attention keys and values cached and the cross-attention's
    projected once per source, as transformers' generate() runs with its cache. Prints the time
    of the encoder and the steps (after a warm-up run) and the ids."""
    import time
    torch.set_num_threads(threads)
    config, _, w = load(folder, torch.float32)
    eps, H, C = config["layer_norm_epsilon"], config["num_heads"], config["d_model"]
    layers = config.get("num_decoder_layers") or config["num_layers"]
    D = config["d_kv"]  # each head's width: the attention is H * D wide, not necessarily C
    head = w.get("lm_head.weight", w["shared.weight"])
    scale = config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True))
    g = torch.Generator().manual_seed(1)
    source = torch.randint(3, max(4, config["vocab_size"] - 100), (1, source_len), generator=g)
    heads = lambda y: y.view(1, -1, H, D).transpose(1, 2)  # noqa: E731  [1, H, T, D]
    table = w["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]  # [buckets, H]

    def attend(q, k, v, bias):
        p = torch.softmax(q @ k.transpose(-1, -2) + bias, -1)
        return (p @ v).transpose(1, 2).reshape(1, -1, H * D)

    def run():
        x = w["shared.weight"][source]
        bias = t5_position_bias(config, w, "encoder", source_len, source_len, True)
        for i in range(config["num_layers"]):
            p = f"encoder.block.{i}."
            h = rms_norm(x, w, p + "layer.0.layer_norm", eps)
            a = p + "layer.0.SelfAttention."
            x = x + linear(attend(heads(linear(h, w, a + "q")), heads(linear(h, w, a + "k")),
                                  heads(linear(h, w, a + "v")), bias), w, a + "o")
            x = x + t5_ff(config, w, p + "layer.1.", rms_norm(x, w, p + "layer.1.layer_norm", eps))
        enc = rms_norm(x, w, "encoder.final_layer_norm", eps)
        cross = [(heads(linear(enc, w, f"decoder.block.{i}.layer.1.EncDecAttention.k")),
                  heads(linear(enc, w, f"decoder.block.{i}.layer.1.EncDecAttention.v"))) for i in range(layers)]
        keys, values = [None] * layers, [None] * layers
        tok, out = config["decoder_start_token_id"], []
        for pos in range(new_tokens):
            y = w["shared.weight"][[tok]][None]  # [1, 1, C]
            rel = torch.arange(pos + 1) - pos
            bias = table[t5_bucket(rel, False, config["relative_attention_num_buckets"],
                                   config["relative_attention_max_distance"])].T[:, None, :]  # [H, 1, pos+1]
            for i in range(layers):
                p = f"decoder.block.{i}."
                h = rms_norm(y, w, p + "layer.0.layer_norm", eps)
                a = p + "layer.0.SelfAttention."
                k, v = heads(linear(h, w, a + "k")), heads(linear(h, w, a + "v"))
                keys[i] = k if pos == 0 else torch.cat([keys[i], k], 2)
                values[i] = v if pos == 0 else torch.cat([values[i], v], 2)
                y = y + linear(attend(heads(linear(h, w, a + "q")), keys[i], values[i], bias), w, a + "o")
                h = rms_norm(y, w, p + "layer.1.layer_norm", eps)
                a = p + "layer.1.EncDecAttention."
                y = y + linear(attend(heads(linear(h, w, a + "q")), *cross[i], 0.0), w, a + "o")
                y = y + t5_ff(config, w, p + "layer.2.", rms_norm(y, w, p + "layer.2.layer_norm", eps))
            y = rms_norm(y, w, "decoder.final_layer_norm", eps)
            if scale:
                y = y * C ** -0.5
            tok = int((y[0, -1] @ head.T).argmax())
            out.append(tok)
        return out

    with torch.inference_mode():
        run()  # warm-up
        start = time.perf_counter()
        ids = run()
        seconds = time.perf_counter() - start
    print(f"torch {torch.__version__} float32, {threads} threads: a {source_len}-token source and "
          f"{new_tokens} greedy tokens in {seconds:.3f} s")
    return ids


# ---------------------------------------------------------------- generation, as `generate` does it

class Settings:
    """What generate() takes: max_length counts the decoder start token (1 + max_new_tokens);
    early_stopping is True, False or "never"; eos None for no eos; forced_eos forces the eos at
    the last allowed step (ForcedEOSTokenLogitsProcessor)."""

    def __init__(self, start, max_new_tokens, eos=None, pad=None, num_beams=1, length_penalty=1.0,
                 early_stopping=False, no_repeat_ngram_size=0, forced_eos=None):
        self.start, self.max_length, self.eos, self.pad = start, 1 + max_new_tokens, eos, pad
        self.num_beams, self.length_penalty = num_beams, length_penalty
        self.early_stopping, self.no_repeat_ngram_size = early_stopping, no_repeat_ngram_size
        self.forced_eos = forced_eos


def process(s, seqs, scores):
    """The logits processors generate() builds from these settings, on scores [n, V] of the
    sequences seqs [n, t]: no_repeat_ngram bans (over the whole sequence, start token included),
    then forced eos at the last step (every score -inf, the eos 0)."""
    n, t = seqs.shape
    N = s.no_repeat_ngram_size
    if N and t + 1 >= N:
        for i in range(n):
            row = seqs[i].tolist()
            prefix = tuple(row[t - N + 1:])
            banned = {g[-1] for g in zip(*[row[j:] for j in range(N)]) if tuple(g[:-1]) == prefix}
            for tok in banned:
                scores[i, tok] = -math.inf
    if s.forced_eos is not None and t == s.max_length - 1:
        scores = torch.full_like(scores, -math.inf)
        scores[:, s.forced_eos] = 0
    return scores


def stable_topk(x, k):
    """(values, indices) of the k largest along the last axis, equal values in index order."""
    v, i = torch.sort(x, dim=-1, descending=True, stable=True)
    return v[..., :k], i[..., :k]


def greedy(s, next_logits):
    """HF's greedy search of one sequence: ids with the start token, ending at eos or the limit."""
    seq = torch.tensor([[s.start]])
    while seq.shape[1] < s.max_length:
        scores = process(s, seq, next_logits(seq).clone())
        tok = int(stable_topk(scores, 1)[1][0, 0])
        seq = torch.cat([seq, torch.tensor([[tok]])], 1)
        if tok == s.eos:
            break
    return seq[0].tolist()


def beam_search(s, vocab, next_logits):
    """HF's _beam_search (transformers 5.x) for one source: the best finished hypothesis, with the
    start token, without padding. next_logits(seqs [n, t]) -> [n, V] raw logits."""
    if s.num_beams == 1:
        return greedy(s, next_logits)
    K, L, lp = s.num_beams, s.max_length, s.length_penalty
    keep = max(2, 1 + (s.eos is not None)) * K  # room for every beam to pick an eos and go on
    NEG = -1.0e9
    running = torch.full((K, L), s.start, dtype=torch.long)  # [K, L] running sequences
    run_scores = torch.tensor([0.0] + [NEG] * (K - 1), dtype=torch.float64)  # beam 0 alone at first
    fin = running.clone()                                       # [K, L] finished hypotheses
    fin_scores = torch.full((K,), NEG, dtype=torch.float64)     # length-penalised
    fin_len = torch.ones(K, dtype=torch.long)                   # tokens in each, start included
    is_fin = torch.zeros(K, dtype=torch.bool)
    unsatisfied = True  # the early-stop heuristic: can a running beam still beat the worst finished?
    cur = 1
    while True:
        logp = torch.log_softmax(next_logits(running[:, :cur]).to(torch.float64), -1)
        logp = process(s, running[:, :cur], logp) + run_scores[:, None]
        top, idx = stable_topk(logp.reshape(-1), keep)          # [keep]
        parent, tok = idx // vocab, idx % vocab
        cand = running[parent].clone()
        cand[:, cur] = tok
        # A candidate hits a stopping criterion at eos or at the length limit.
        hits = (tok == s.eos) if s.eos is not None else torch.zeros(keep, dtype=torch.bool)
        hits = hits | (cur + 1 >= L)
        # The next running beams: the best K that did not stop.
        _, nxt = stable_topk(top + hits.double() * NEG, K)
        running, run_scores = cand[nxt], (top + hits.double() * NEG)[nxt]
        # Finished: of the top K candidates only (the rest were kept as spares for the running
        # set), those that stopped, scored by length (generated tokens, the new one included)
        # ** length_penalty; merged with the finished ones so far, best K kept.
        just = hits & (torch.arange(keep) < K)
        pen = top / float(cur) ** lp  # cur + 1 tokens, less the one of the decoder's prompt
        pen = pen + float(bool(is_fin.all()) and s.early_stopping is True) * NEG
        pen = pen + float(not unsatisfied) * NEG
        pen = pen + (~just).double() * NEG
        merged = torch.cat([fin_scores, pen])
        _, best = stable_topk(merged, K)
        fin = torch.cat([fin, cand])[best]
        fin_len = torch.cat([fin_len, torch.full((keep,), cur + 1)])[best]
        fin_scores = merged[best]
        is_fin = torch.cat([is_fin, just])[best]
        cur += 1
        # The heuristic: the best running beam at its best possible length (its own length, or
        # for "never" with a positive penalty the limit) against the worst finished one.
        length = (L - 1) if (s.early_stopping == "never" and lp > 0) else (cur - 1)
        best_running = float(run_scores[0]) / float(length) ** lp
        worst = torch.where(is_fin, fin_scores.min(), torch.tensor(NEG, dtype=torch.float64))
        unsatisfied = unsatisfied and bool((best_running > worst).any())
        open_beam = not (bool(is_fin.all()) and s.early_stopping is True)
        if not (unsatisfied and open_beam and not bool(hits.all())):
            break
    return fin[0, :int(fin_len[0])].tolist()


def pad_rows(rows, fill):
    width = max(len(r) for r in rows)
    return [r + [fill] * (width - len(r)) for r in rows]


# ---------------------------------------------------------------- the toy decoder of tests/test_beam.cpp

MASK64 = (1 << 64) - 1


def mix64(z):
    """splitmix64's finaliser: the same bits in the C++ test."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def toy_logits(case, seq):
    """[V] float32 logits after seq (start token included): a hashed value in [-4, 4) of (seed,
    the last two tokens, the id) in steps of 2^-21, so exact in float32; the eos id adds
    eos_bias + eos_slope * len(seq), rounded once to float32 as the C++ does."""
    V, seed, eos = case["vocab"], case["seed"], case.get("eos")
    a, b = (seq[-2] if len(seq) > 1 else seq[-1]), seq[-1]
    row = []
    for v in range(V):
        z = mix64((seed + ((a * V + b) * V + v + 1) * 0x9E3779B97F4A7C15) & MASK64)
        x = ((z >> 40) - (1 << 23)) * 2.0 ** -21
        if v == eos:
            x += case["eos_bias"] + case["eos_slope"] * len(seq)
        row.append(x)
    return torch.tensor(row, dtype=torch.float64).to(torch.float32)


def toy_settings(case):
    return Settings(start=case["start"], max_new_tokens=case["max_new_tokens"], eos=case.get("eos"),
                    num_beams=case["beams"], length_penalty=case["length_penalty"],
                    early_stopping={"false": False, "true": True, "never": "never"}[case["early_stopping"]],
                    no_repeat_ngram_size=case["no_repeat_ngram"], forced_eos=case.get("forced_eos"))


def toy_cases():
    """Every length penalty x early_stopping x no_repeat_ngram, twice: the beam count, the
    length limit, the eos profile (an eos that comes early, late, or none) and forced eos cycle
    with the index; then the edges (one new token, 2 * beams = V, negative and zero penalties)."""
    cases = []
    profiles = [(-1.0, 0.5), (-3.0, 0.25), (1.0, 0.0), (-6.0, 0.0)]  # (eos_bias, eos_slope)
    beams = [2, 3, 4, 5, 8, 1, 6, 7]
    i = 0
    for rnd in range(2):
        for lp in (0.6, 1.0, 2.0):
            for early in ("false", "true", "never"):
                for ngram in (0, 2, 3):
                    bias, slope = profiles[i % len(profiles)]
                    c = {"seed": 1000 + i, "vocab": 50, "start": 0, "beams": beams[i % len(beams)],
                         "length_penalty": lp, "early_stopping": early, "no_repeat_ngram": ngram,
                         "max_new_tokens": (12, 20, 7, 3)[(i // 3) % 4], "eos_bias": bias, "eos_slope": slope}
                    if i % 5 != 4:  # every fifth without an eos at all
                        c["eos"] = 1 + i % 3
                        if i % 2 == rnd:
                            c["forced_eos"] = c["eos"]
                    cases.append(c)
                    i += 1
    # Where the three early_stopping modes pick three different answers: an eos likely enough
    # that every beam slot holds a finished hypothesis long before the limit.
    for seed, bias, slope, lp, k in ((1, -1.0, 0.25, 1.0, 4), (1, 0.0, 0.25, 2.0, 2),
                                     (1, 1.0, 0.25, 2.0, 4), (2, 2.0, 0.25, 2.0, 4)):
        for early in ("false", "true", "never"):
            cases.append({"seed": seed, "vocab": 50, "start": 0, "beams": k, "length_penalty": lp,
                          "early_stopping": early, "no_repeat_ngram": 0, "max_new_tokens": 20,
                          "eos": 2, "eos_bias": bias, "eos_slope": slope})
    edges = [dict(beams=4, max_new_tokens=1, forced_eos=2), dict(beams=8, vocab=16),
             dict(beams=4, length_penalty=-1.0, early_stopping="never"),
             dict(beams=4, length_penalty=0.0, early_stopping="never"),
             dict(beams=3, eos_bias=4.0, eos_slope=0.0, early_stopping="true"),
             dict(beams=64, vocab=128, max_new_tokens=6), dict(beams=1, no_repeat_ngram=1)]
    for j, e in enumerate(edges):
        c = {"seed": 5000 + j, "vocab": 50, "start": 0, "beams": 4, "length_penalty": 1.0,
             "early_stopping": "false", "no_repeat_ngram": 0, "max_new_tokens": 10, "eos": 2,
             "eos_bias": -2.0, "eos_slope": 0.25}
        c.update(e)
        cases.append(c)
    return cases


def toy_goldens():
    out = []
    for c in toy_cases():
        step = lambda seqs, c=c: torch.stack([toy_logits(c, r) for r in seqs.tolist()])  # noqa: E731
        out.append(dict(c, expected=beam_search(toy_settings(c), c["vocab"], step)))
    return {"note": "tools/reference/seq2seq_ref.py --write-goldens; checked by its --check",
            "cases": out}


# ---------------------------------------------------------------- T5 whose attention is not d_model wide

DKV = ROOT / "tests/data/t5-dkv"
# The fixtures' sources and teacher-forced target (tools/reference/hf_fixtures.py's; pad 0, eos 1).
DKV_SOURCES = [[13, 7, 42, 19, 5, 1], [22, 8, 31, 1, 0, 0], [3, 44, 17, 29, 11, 1]]
DKV_TARGET = [0, 9, 14, 27, 6, 33, 1]
DKV_COMMON = dict(model_type="t5", architectures=["T5ForConditionalGeneration"], is_encoder_decoder=True,
                  vocab_size=64, num_layers=2, num_decoder_layers=2, relative_attention_num_buckets=8,
                  relative_attention_max_distance=20, layer_norm_epsilon=1e-6, pad_token_id=0,
                  eos_token_id=1, decoder_start_token_id=0)
DKV_SHAPES = {
    # t5-v1_1-small's and flan-t5-small's pattern: attention narrower than the model (3 x 16 = 48
    # in 64; 64 is no multiple of 3 heads), gated GELU, an untied head.
    # One decoder layer to the encoder's two (num_decoder_layers).
    "narrow": dict(d_model=64, num_heads=3, d_kv=16, d_ff=64, num_decoder_layers=1,
                   feed_forward_proj="gated-gelu", dense_act_fn="gelu_new", is_gated_act=True,
                   tie_word_embeddings=False, scale_decoder_outputs=False),
    # t5-3b's and t5-11b's: wider (4 x 16 = 64 in 32), v1.0's ReLU and tied, scaled head.
    "wide": dict(d_model=32, num_heads=4, d_kv=16, d_ff=64, feed_forward_proj="relu",
                 dense_act_fn="relu", is_gated_act=False, tie_word_embeddings=True,
                 scale_decoder_outputs=True),
}

# The seeds of 500-529 whose greedy and beam rows run longest before an eos or a loop.
DKV_SEEDS = {"narrow": 519, "wide": 502}


def dkv_weights(config, seed):
    """{name: float32 tensor} in transformers' T5 names and [out, in] layout, drawn as T5's
    _init_weights draws them with initializer_factor 4 (q [A, C] by (C d_kv)^-1/2, o [C, A] by
    A^-1/2, ...) so that greedy decoding does not repeat one token; the norms' weights near 1 but
    each its own, so that a norm read in the wrong place shows."""
    g = torch.Generator().manual_seed(seed)
    C, H, D, F, V = (config[k] for k in ("d_model", "num_heads", "d_kv", "d_ff", "vocab_size"))
    A, f = H * D, 4.0
    w = {}

    def draw(name, shape, std):
        w[name] = (torch.randn(shape, generator=g, dtype=torch.float64) * std).to(torch.float32)

    def norm(name):
        w[name] = (1 + 0.25 * torch.randn(C, generator=g, dtype=torch.float64)).to(torch.float32)

    def attn(p):
        draw(p + "q.weight", (A, C), f * (C * D) ** -0.5)
        draw(p + "k.weight", (A, C), f * C ** -0.5)
        draw(p + "v.weight", (A, C), f * C ** -0.5)
        draw(p + "o.weight", (C, A), f * A ** -0.5)

    def ff(p):
        for wi in (("wi_0", "wi_1") if config["is_gated_act"] else ("wi",)):
            draw(p + f"DenseReluDense.{wi}.weight", (F, C), f * C ** -0.5)
        draw(p + "DenseReluDense.wo.weight", (C, F), f * F ** -0.5)
        norm(p + "layer_norm.weight")

    draw("shared.weight", (V, C), f)
    for stack, cross, layers in (("encoder", False, "num_layers"), ("decoder", True, "num_decoder_layers")):
        draw(f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
             (config["relative_attention_num_buckets"], H), f * C ** -0.5)
        for i in range(config[layers]):
            p = f"{stack}.block.{i}.layer."
            attn(p + "0.SelfAttention.")
            norm(p + "0.layer_norm.weight")
            if cross:
                attn(p + "1.EncDecAttention.")
                norm(p + "1.layer_norm.weight")
            ff(p + ("2." if cross else "1."))
        norm(f"{stack}.final_layer_norm.weight")
    if not config["tie_word_embeddings"]:
        draw("lm_head.weight", (V, C), f * C ** -0.5)
    return w


def write_dkv(name, seed):
    """DKV/name: config.json, model.safetensors, and this reference's outputs as the fixtures
    hold transformers' (hf_fixtures.py's seq2seq()): float64 runs of the saved float32 weights."""
    d = DKV / name
    d.mkdir(parents=True, exist_ok=True)
    config = dict(DKV_COMMON, **DKV_SHAPES[name])
    (d / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_safetensors(d / "model.safetensors", dkv_weights(config, seed))
    model = Seq2Seq(d)
    ids = torch.tensor(DKV_SOURCES)
    mask = (ids != config["pad_token_id"]).long()
    dec = torch.tensor([DKV_TARGET] * len(DKV_SOURCES))
    enc = model.encode(ids, mask)
    logits = model.logits(enc, mask, dec)
    write_safetensors(d / "expected.safetensors", {
        "input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec,
        "logits": logits.contiguous(), "encoder_hidden": enc.contiguous()})
    gen = {"max_new_tokens": 12}
    meta = {"generate": gen,
            "beam_settings": {"num_beams": 4, "length_penalty": 1.0, "early_stopping": True},
            "beam_ngram_settings": {"num_beams": 4, "length_penalty": 0.6, "early_stopping": False,
                                    "no_repeat_ngram_size": 2},
            "note": "tools/reference/seq2seq_ref.py --write-dkv: float64 outputs of the float32 "
                    "weights and generated ids from this reference, not from transformers"}
    runs = {"greedy": {}, "beams4": meta["beam_settings"], "beams4_ngram": meta["beam_ngram_settings"]}
    for key, beam in runs.items():
        st = fixture_settings(model, meta, **beam)
        rows = []
        for b in range(len(DKV_SOURCES)):
            def step(seqs, b=b):
                n = seqs.shape[0]
                return model.logits(enc[b:b + 1].expand(n, -1, -1), mask[b:b + 1].expand(n, -1), seqs)[:, -1]
            rows.append(beam_search(st, config["vocab_size"], step))
        meta[key] = pad_rows(rows, st.pad if key == "greedy" else (st.pad or st.eos))
    (d / "expected.json").write_text(json.dumps(meta, indent=1) + "\n")
    return d


# ---------------------------------------------------------------- checks

def scaled_error(got, ref):
    scale = ref.abs().amax(-1, keepdim=True).clamp(min=1)
    return ((got - ref).abs() / scale).max().item()


def fixture_settings(model, meta, **beam):
    c, g = model.config, model.gen
    get = lambda k: g.get(k, c.get(k))  # noqa: E731  the generation config first, as generate reads it
    return Settings(start=get("decoder_start_token_id"), max_new_tokens=meta["generate"]["max_new_tokens"],
                    eos=get("eos_token_id"), pad=get("pad_token_id"),
                    forced_eos=get("forced_eos_token_id"), **beam)


def check_fixture(folder):
    """{what: (agreement, ok)} for one folder."""
    model = Seq2Seq(folder)
    e, _ = read_safetensors(Path(folder) / "expected.safetensors")
    meta = json.loads((Path(folder) / "expected.json").read_text())
    ids, mask, dec = e["input_ids"], e["attention_mask"], e["decoder_input_ids"]
    enc = model.encode(ids, mask)
    res = {}
    err = scaled_error(enc, e["encoder_hidden"])
    res["encoder_hidden"] = (f"{err:.1e}", err <= 1e-9)
    err = scaled_error(model.logits(enc, mask, dec), e["logits"])
    res["logits"] = (f"{err:.1e}", err <= 1e-9)
    V = e["logits"].shape[-1]
    bs, ns = meta["beam_settings"], meta["beam_ngram_settings"]
    runs = {"greedy": {}, "beams4": dict(num_beams=bs["num_beams"], length_penalty=bs["length_penalty"],
                                         early_stopping=bs["early_stopping"]),
            "beams4_ngram": dict(num_beams=ns["num_beams"], length_penalty=ns["length_penalty"],
                                 early_stopping=ns["early_stopping"],
                                 no_repeat_ngram_size=ns["no_repeat_ngram_size"])}
    for name, beam in runs.items():
        s = fixture_settings(model, meta, **beam)
        rows = []
        for b in range(ids.shape[0]):
            def step(seqs, b=b):
                n = seqs.shape[0]
                return model.logits(enc[b:b + 1].expand(n, -1, -1), mask[b:b + 1].expand(n, -1), seqs)[:, -1]
            rows.append(beam_search(s, V, step))
        # generate pads a batch to its longest row: greedy with pad, beam search with
        # `pad_token_id or eos_token_id` (T5's pad 0 is falsy: its beams pad with eos).
        fill = s.pad if name == "greedy" else (s.pad or s.eos)
        got = pad_rows(rows, fill)
        same = sum(g == x for g, x in zip(got, meta[name]))
        res[name] = (f"{same}/{len(got)} rows", same == len(got))
    return res


def check_torch_layers(folder):
    """Marian's layers against torch.nn's post-LN Transformer layers: max abs difference."""
    config, _, w = load(folder)
    e, _ = read_safetensors(Path(folder) / "expected.safetensors")
    ids, mask, dec = e["input_ids"], e["attention_mask"], e["decoder_input_ids"]
    act = {"swish": F.silu, "silu": F.silu, "gelu": "gelu", "relu": "relu"}[config["activation_function"]]
    C = config["d_model"]
    kw = dict(dropout=0.0, activation=act, layer_norm_eps=1e-5, batch_first=True, norm_first=False,
              dtype=torch.float64)

    def copy_attn(mha, p):
        mha.in_proj_weight.copy_(torch.cat([w[p + n + ".weight"] for n in ("q_proj", "k_proj", "v_proj")]))
        mha.in_proj_bias.copy_(torch.cat([w[p + n + ".bias"] for n in ("q_proj", "k_proj", "v_proj")]))
        mha.out_proj.weight.copy_(w[p + "out_proj.weight"])
        mha.out_proj.bias.copy_(w[p + "out_proj.bias"])

    def copy(mod, name, p):
        getattr(mod, name).weight.copy_(w[p + ".weight"])
        getattr(mod, name).bias.copy_(w[p + ".bias"])

    worst = 0.0
    real = mask.bool()
    with torch.no_grad():
        x = marian_embed(config, w, ids)
        for i in range(config["encoder_layers"]):
            p = f"model.encoder.layers.{i}."
            t = torch.nn.TransformerEncoderLayer(C, config["encoder_attention_heads"],
                                                 config["encoder_ffn_dim"], **kw).eval()
            copy_attn(t.self_attn, p + "self_attn.")
            for name, src in (("linear1", "fc1"), ("linear2", "fc2"), ("norm1", "self_attn_layer_norm"),
                              ("norm2", "final_layer_norm")):
                copy(t, name, p + src)
            ours = marian_encoder_layer(config, w, p, x, padding_bias(mask))
            theirs = t(x, src_key_padding_mask=~real)
            worst = max(worst, (ours - theirs)[real].abs().max().item())
            x = ours
        enc, y, T = x, marian_embed(config, w, dec), dec.shape[1]
        for i in range(config["decoder_layers"]):
            p = f"model.decoder.layers.{i}."
            t = torch.nn.TransformerDecoderLayer(C, config["decoder_attention_heads"],
                                                 config["decoder_ffn_dim"], **kw).eval()
            copy_attn(t.self_attn, p + "self_attn.")
            copy_attn(t.multihead_attn, p + "encoder_attn.")
            for name, src in (("linear1", "fc1"), ("linear2", "fc2"), ("norm1", "self_attn_layer_norm"),
                              ("norm2", "encoder_attn_layer_norm"), ("norm3", "final_layer_norm")):
                copy(t, name, p + src)
            ours = marian_decoder_layer(config, w, p, y, enc, causal_bias(T), padding_bias(mask))
            theirs = t(y, enc, tgt_mask=causal_bias(T), memory_key_padding_mask=~real)
            worst = max(worst, (ours - theirs).abs().max().item())
            y = ours
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", nargs="*")
    ap.add_argument("--write-goldens", action="store_true")
    ap.add_argument("--write-dkv", action="store_true")
    ap.add_argument("--bench-t5", metavar="DIR", help="time t5_bench on a T5 folder")
    ap.add_argument("--source", type=int, default=64)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--grads", nargs=3, metavar=("DIR", "BATCH", "OUT_DIR"))
    a = ap.parse_args()
    if a.grads:
        print(json.dumps({"loss": marian_grads(*a.grads)}))
        return 0
    if a.bench_t5:
        t5_bench(a.bench_t5, a.source, a.new, a.threads)
        return 0
    if a.write_goldens:
        GOLDENS.parent.mkdir(parents=True, exist_ok=True)
        GOLDENS.write_text(json.dumps(toy_goldens(), indent=None, separators=(",", ":")).replace(
            '{"seed"', '\n{"seed"') + "\n")
        print(f"wrote {GOLDENS.relative_to(ROOT)}")
        return 0
    if a.write_dkv:
        for name, seed in DKV_SEEDS.items():
            print(f"wrote {write_dkv(name, seed).relative_to(ROOT)}")
        return 0
    if a.check is None:
        ap.error("--check, --write-goldens or --write-dkv")
    hf = ROOT / "tests/data/hf"
    saved = ("marian", "t5-v1_0", "t5-v1_1", "t5-narrow", "t5-wide")
    folders = a.check or ([str(hf / n) for n in saved] +
                          [str(DKV / n) for n in DKV_SHAPES])
    bad = 0
    print(f"{'fixture':10} {'encoder_hidden':>14} {'logits':>8} {'greedy':>8} {'beams4':>8} {'beams4_ngram':>12}"
          "   (hidden, logits: max |diff| / row max, ok <= 1e-9; ids: rows identical)")
    for folder in folders:
        r = check_fixture(folder)
        ok = all(v[1] for v in r.values())
        bad += not ok
        print(f"{Path(folder).name:10} {r['encoder_hidden'][0]:>14} {r['logits'][0]:>8} {r['greedy'][0]:>8} "
              f"{r['beams4'][0]:>8} {r['beams4_ngram'][0]:>12}   {'ok' if ok else 'BAD'}")
    if not a.check:
        d = check_torch_layers(hf / "marian")
        ok = d <= 1e-12
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} marian layers against torch.nn.Transformer{{En,De}}coderLayer: "
              f"max abs diff {d:.1e} (ok <= 1e-12)")
        same = json.loads(GOLDENS.read_text()) == toy_goldens()
        bad += not same
        print(f"{'ok ' if same else 'BAD'} {GOLDENS.relative_to(ROOT)} is what --write-goldens writes now")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
