"""An independent PyTorch reference for the GPT-2 model family that gpt2vk runs.

Written from the published GPT-2 definition (Hugging Face's GPT2LMHeadModel: Conv1D layers
y = x W + b, fused q|k|v projection, heads as contiguous D-wide column blocks, tanh GELU) and the
project's variant keys (tests/data/models/README.md), using torch primitives only. It shares no
code with the C++ engine, so agreement between the two means something.

Run it with Debian's interpreter, /usr/bin/python3 (python3-torch 1.13).

    config, tensors = load_checkpoint("tests/data/models/gpt2-tiny")
    logits = forward(config, tensors, [72, 101, 108])   # [T, V] float64
    ids = greedy(config, tensors, [72, 101], 8)         # the 8 ids that follow
"""
import json
import math
import struct
from pathlib import Path
from types import SimpleNamespace

import torch

# safetensors dtype names <-> torch dtypes (the ones a checkpoint may hold).
DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


# ---------------------------------------------------------------- safetensors, by hand
def read_safetensors(path):
    """Returns ({name: tensor in its stored dtype}, metadata dict).

    Layout: u64 little-endian header length N, N bytes of JSON
    {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
    then the data; offsets are relative to the first byte after the header.
    """
    data = Path(path).read_bytes()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        dtype = DTYPES[info["dtype"]]
        shape = info["shape"]
        begin, end = info["data_offsets"]
        size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if end - begin != size or not 0 <= begin <= end <= len(data) - base:
            raise ValueError(f"{path}: {name}: data_offsets {begin, end} do not fit shape {shape}")
        raw = bytearray(data[base + begin:base + end])  # frombuffer wants a writable buffer
        flat = torch.frombuffer(raw, dtype=dtype) if size else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(shape)
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} (F64/F32/F16/BF16) in name order, header padded to 8 bytes."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        blob = t.reshape(-1).view(torch.uint8).numpy().tobytes()  # host is little-endian
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ---------------------------------------------------------------- config and tensor names
def resolve(config):
    """The config dict with every default filled in, as attributes."""
    c = config
    n_embd, n_head = c["n_embd"], c["n_head"]
    activation = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                  "gelu": "gelu_erf", "relu": "relu"}[c.get("activation_function", "gelu_new")]
    if "attention_scale" in c:
        scale = float(c["attention_scale"])
    elif c.get("scale_attn_weights", True):
        scale = 1.0 / math.sqrt(n_embd // n_head)
    else:
        scale = 1.0
    if c.get("scale_attn_by_inverse_layer_idx") or c.get("reorder_and_upcast_attn"):
        raise ValueError("scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn: unsupported")
    s = SimpleNamespace(
        n_vocab=c["vocab_size"], n_ctx=c.get("n_positions", c.get("n_ctx")), n_embd=n_embd,
        n_layer=c["n_layer"], n_head=n_head, n_inner=c.get("n_inner") or 4 * n_embd,
        eps=c.get("layer_norm_epsilon", 1e-5), activation=activation,
        tied=c.get("tie_word_embeddings", True),
        pre_norm={"pre": True, "post": False}[c.get("norm_position", "pre")],
        final_norm=c.get("final_norm", True),
        positions=c.get("position_embedding", "learned"),
        attention_bias=c.get("attention_bias", True), mlp_bias=c.get("mlp_bias", True),
        causal=c.get("causal", True),
        layer_norm=c.get("layer_norm_formula", "standard"),
        attention_only=c.get("attention_only", False), attention_scale=scale)
    if n_embd % n_head or s.positions not in ("learned", "sinusoidal", "none") \
            or s.layer_norm not in ("standard", "std_plus_eps") \
            or (s.positions == "sinusoidal" and n_embd % 2):
        raise ValueError(f"inconsistent config: {s}")
    return s


def expected_shapes(config):
    """{tensor name: shape} that a checkpoint with this config must hold, no more, no less."""
    s = resolve(config)
    C, V, I = s.n_embd, s.n_vocab, s.n_inner
    shapes = {"wte.weight": [V, C]}
    if s.positions == "learned":
        shapes["wpe.weight"] = [s.n_ctx, C]

    def linear(name, n_in, n_out, bias):  # HF Conv1D: weight [in, out]
        shapes[name + ".weight"] = [n_in, n_out]
        if bias:
            shapes[name + ".bias"] = [n_out]

    for i in range(s.n_layer):
        p = f"h.{i}."
        linear(p + "attn.c_attn", C, 3 * C, s.attention_bias)
        linear(p + "attn.c_proj", C, C, s.attention_bias)
        if not s.attention_only:
            for ln in ("ln_1", "ln_2"):
                shapes[p + ln + ".weight"] = shapes[p + ln + ".bias"] = [C]
            linear(p + "mlp.c_fc", C, I, s.mlp_bias)
            linear(p + "mlp.c_proj", I, C, s.mlp_bias)
    if s.final_norm:
        shapes["ln_f.weight"] = shapes["ln_f.bias"] = [C]
    if not s.tied:
        shapes["lm_head.weight"] = [V, C]
    return shapes


def check_tensors(config, tensors, where="checkpoint"):
    expected = expected_shapes(config)
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise ValueError(f"{where}: missing tensors {missing}, unexpected tensors {extra}")
    for name, shape in expected.items():
        if list(tensors[name].shape) != shape:
            raise ValueError(f"{where}: {name}: shape {list(tensors[name].shape)}, want {shape}")


def load_checkpoint(folder):
    """(config dict, {name: tensor in its stored dtype}) from config.json + model.safetensors."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    tensors, _ = read_safetensors(folder / "model.safetensors")
    # GPT2LMHeadModel.save_pretrained may prefix the body with "transformer.".
    tensors = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    check_tensors(config, tensors, str(folder))
    return config, tensors


def round_weights(tensors, dtype=torch.float16):
    """The matrices rounded to `dtype` and back to float32; 1-D tensors (biases, LayerNorm)
    kept as they are: what an engine that stores its weight matrices in fp16 sees."""
    return {k: v.to(dtype).to(torch.float32) if v.dim() == 2 else v.float()
            for k, v in tensors.items()}


# ---------------------------------------------------------------- the model
def sinusoidal(T, C, dtype):
    """PE[pos, 2i] = sin(pos / 10000^(2i/C)), PE[pos, 2i+1] = cos(same).  [T, C]"""
    pos = torch.arange(T, dtype=torch.float64)[:, None]           # [T, 1]
    two_i = torch.arange(0, C, 2, dtype=torch.float64)[None, :]   # [1, C/2]
    angle = pos / torch.pow(10000.0, two_i / C)                   # [T, C/2]
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(T, C).to(dtype)


def layer_norm(s, w, name, x):  # [T, C] -> [T, C]
    g, b = w[name + ".weight"], w[name + ".bias"]
    centred = x - x.mean(dim=-1, keepdim=True)
    if s.layer_norm == "standard":  # population variance inside the root
        return g * centred / torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + s.eps) + b
    # The Annotated Transformer: unbiased std, eps added outside the root.
    return g * centred / (x.std(dim=-1, keepdim=True) + s.eps) + b


def conv1d(w, name, x):  # [T, in] -> [T, out]; HF Conv1D, weight [in, out]
    y = x @ w[name + ".weight"]
    return y + w[name + ".bias"] if name + ".bias" in w else y


def activation(s, x):
    if s.activation == "gelu_tanh":  # HF "gelu_new" (NewGELUActivation)
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))
    if s.activation == "gelu_erf":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    return torch.clamp(x, min=0)


def attention(s, w, p, x):  # [T, C] -> [T, C]
    T, C = x.shape
    H, D = s.n_head, C // s.n_head
    qkv = conv1d(w, p + "attn.c_attn", x)                                 # [T, 3C]
    q, k, v = (t.reshape(T, H, D).transpose(0, 1) for t in qkv.split(C, dim=1))  # [H, T, D]
    scores = (q @ k.transpose(1, 2)) * s.attention_scale                  # [H, T, T]
    if s.causal:  # query t sees keys 0..t
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v                                 # [H, T, D]
    return conv1d(w, p + "attn.c_proj", y.transpose(0, 1).reshape(T, C))


def mlp(s, w, p, x):  # [T, C] -> [T, C]
    return conv1d(w, p + "mlp.c_proj", activation(s, conv1d(w, p + "mlp.c_fc", x)))


def forward(config, tensors, ids, dtype=torch.float64):
    """Logits [T, V] for the token ids (1 <= T <= n_positions), computed in `dtype`."""
    s = resolve(config)
    check_tensors(config, tensors)
    w = {k: v.to(dtype) for k, v in tensors.items()}
    ids = torch.as_tensor(list(ids), dtype=torch.long)
    T = len(ids)
    if not 1 <= T <= s.n_ctx or int(ids.min()) < 0 or int(ids.max()) >= s.n_vocab:
        raise ValueError(f"ids: {T} ids, or an id out of [0, {s.n_vocab})")
    x = w["wte.weight"][ids.to(w["wte.weight"].device)]                   # [T, C]
    if s.positions == "learned":
        x = x + w["wpe.weight"][:T]
    elif s.positions == "sinusoidal":
        x = x + sinusoidal(T, s.n_embd, dtype).to(x.device)
    for i in range(s.n_layer):
        p = f"h.{i}."
        if s.attention_only:
            x = x + attention(s, w, p, x)
        elif s.pre_norm:  # GPT-2
            x = x + attention(s, w, p, layer_norm(s, w, p + "ln_1", x))
            x = x + mlp(s, w, p, layer_norm(s, w, p + "ln_2", x))
        else:  # Add & Norm (2017)
            x = layer_norm(s, w, p + "ln_1", x + attention(s, w, p, x))
            x = layer_norm(s, w, p + "ln_2", x + mlp(s, w, p, x))
    if s.final_norm:
        x = layer_norm(s, w, "ln_f", x)
    head = w["wte.weight"] if s.tied else w["lm_head.weight"]            # [V, C]
    return x @ head.T                                                     # [T, V]


def greedy_with_margins(config, tensors, prompt, n, dtype=torch.float64):
    """The n ids greedy decoding appends to `prompt`, and at each step the gap between the
    largest and second-largest logit. Recomputes the whole sequence every step (no cache);
    never stops early (eos is not special here). Ties go to the lowest id."""
    ids, margins = list(prompt), []
    for _ in range(n):
        last = forward(config, tensors, ids, dtype)[-1]                   # [V]
        top = torch.topk(last, min(2, len(last))).values
        margins.append(float(top[0] - top[-1]))
        ids.append(int(torch.argmax(last)))
    return ids[len(prompt):], margins


def greedy(config, tensors, prompt, n, dtype=torch.float64):
    return greedy_with_margins(config, tensors, prompt, n, dtype)[0]


def mean_nll(logits, ids):
    """Mean negative log-likelihood of ids[t+1] under logits[t], t < T-1."""
    logp = torch.log_softmax(logits.to(torch.float64), dim=-1)
    targets = torch.as_tensor(list(ids)[1:], dtype=torch.long)
    return float(-logp[torch.arange(len(targets)), targets].mean())


def tokenize(config, text):
    """ids of `text` for the "bytes" and "chars" tokenizers (the only ones the goldens use)."""
    kind = config.get("tokenizer", "gpt2")
    if kind == "bytes":
        return list(text.encode("utf-8"))
    if kind == "chars":
        return [config["chars"].index(ch) for ch in text]
    raise ValueError(f"tokenizer {kind!r}: not implemented in the reference")
