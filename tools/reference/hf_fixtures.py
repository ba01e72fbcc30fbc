"""Test fixtures saved by Hugging Face's own libraries: the layout check against the library itself.

Run where transformers and sentence-transformers are installed (the lent GPU machine's image; not
Debian 12). Every model is a tiny random one, built from its config with a fixed seed and saved
with the library's own save_pretrained / save, beside its outputs on fixed inputs:

  bert-mlm/, bert-seqcls/, bert-tokcls/   BertFor{MaskedLM,SequenceClassification,TokenClassification}
  bert-st/                                a sentence-transformers folder (BertModel, mean pooling,
                                          Normalize), as SentenceTransformer.save writes it
  t5-v1_0/, t5-v1_1/                      T5ForConditionalGeneration (ReLU tied; gated GELU untied)
  t5-narrow/, t5-wide/                    the same with d_kv x num_heads != d_model (3 x 16 in 64,
                                          gated; 4 x 16 in 32, ReLU): tests/data/t5-dkv's shapes
  marian/                                 MarianMTModel (swish, scaled sinusoidal positions)

Each folder gets expected.safetensors (inputs as I64, outputs in F64: the model run in float64
on the CPU, and in F32 as saved) and expected.json (texts, settings, generated ids, versions).

    python3 tools/reference/hf_fixtures.py OUT_DIR
"""
import json
import sys
import traceback
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "hf_fixtures")

# A small uncased WordPiece vocabulary: specials, letters, words the texts use, pieces, punctuation.
WORDS = ("the cat sat on mat paris is capital of france dog ran in park music and light "
         "water house small big new old day night city river text model we run it here").split()
PIECES = ["##ed", "##ing", "##er", "##ly", "##es", "##al"]
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz")
         + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + WORDS
         + PIECES
         + list(".,!?;:'\"()-") + ["é", "ß", "中", "国"])
TEXTS = ["The cat sat on the mat.", "Paris is the [MASK] of France!",
         "A dog ran in the park, and the music played at night.", "Über-small café 中国 text"]
PAIR = ("the city is new", "the river is old")


def write_vocab(d):
    (d / "vocab.txt").write_text("".join(w + "\n" for w in VOCAB), encoding="utf-8")


def f64(model, fn):
    """fn(model) in float64 on a copy; the saved model stays float32."""
    import copy
    m = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        return fn(m)


def bert_family(root):
    from transformers import (BertConfig, BertForMaskedLM, BertForSequenceClassification,
                              BertForTokenClassification, BertModel, BertTokenizer)
    tmp = root / "_vocab"
    tmp.mkdir(parents=True, exist_ok=True)
    write_vocab(tmp)
    tok = BertTokenizer(str(tmp / "vocab.txt"), do_lower_case=True)
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    pair = tok(*PAIR, return_tensors="pt")
    base = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=0)
    heads = {"bert-mlm": (BertForMaskedLM, {}),
             "bert-seqcls": (BertForSequenceClassification,
                             {"num_labels": 3, "id2label": {0: "NEG", 1: "NEU", 2: "POS"},
                              "label2id": {"NEG": 0, "NEU": 1, "POS": 2}}),
             "bert-tokcls": (BertForTokenClassification,
                             {"num_labels": 5, "id2label": {0: "O", 1: "B-PER", 2: "I-PER",
                                                            3: "B-LOC", 4: "I-LOC"}})}
    for i, (name, (cls, extra)) in enumerate(heads.items()):
        torch.manual_seed(100 + i)
        cfg = BertConfig(**base, **extra)
        model = cls(cfg).eval()
        d = root / name
        model.save_pretrained(d)
        tok.save_pretrained(d)
        if not (d / "vocab.txt").exists():
            write_vocab(d)

        def run(m, e):
            out = m(input_ids=e["input_ids"], token_type_ids=e["token_type_ids"],
                    attention_mask=e["attention_mask"], output_hidden_states=True)
            return out.logits, out.hidden_states[-1]

        tensors = {"input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"],
                   "attention_mask": enc["attention_mask"], "pair_input_ids": pair["input_ids"],
                   "pair_token_type_ids": pair["token_type_ids"]}
        logits64, hidden64 = f64(model, lambda m: run(m, enc))
        plogits64, phidden64 = f64(model, lambda m: run(m, pair))
        with torch.no_grad():
            logits32, hidden32 = run(model, enc)
        tensors.update(logits=logits64, hidden=hidden64, logits_f32=logits32,
                       hidden_f32=hidden32, pair_logits=plogits64, pair_hidden=phidden64)
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "expected.safetensors"))
        meta = {"texts": TEXTS, "pair": PAIR, "model": cls.__name__,
                "tokens": [tok.convert_ids_to_tokens(r) for r in enc["input_ids"].tolist()],
                "note": "logits/hidden: float64 run of the saved float32 weights; *_f32: float32"}
        (d / "expected.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False))

    # sentence-transformers: a BertModel with mean pooling and normalisation, saved by the library.
    from sentence_transformers import SentenceTransformer, models
    torch.manual_seed(200)
    inner = root / "_bert_base"
    BertModel(BertConfig(**base), add_pooling_layer=False).save_pretrained(inner)
    tok.save_pretrained(inner)
    if not (inner / "vocab.txt").exists():
        write_vocab(inner)
    word = models.Transformer(str(inner), max_seq_length=64)
    pool = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="mean")
    st = SentenceTransformer(modules=[word, pool, models.Normalize()], device="cpu")
    d = root / "bert-st"
    st.save(str(d))
    emb32 = st.encode(TEXTS, convert_to_tensor=True, batch_size=2)
    st64 = SentenceTransformer(str(d), device="cpu").double()
    emb64 = st64.encode(TEXTS, convert_to_tensor=True, batch_size=2)
    save_file({"embeddings": emb64.contiguous(), "embeddings_f32": emb32.contiguous(),
               "input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]},
              str(d / "expected.safetensors"))
    (d / "expected.json").write_text(json.dumps({"texts": TEXTS, "pooling": "mean",
                                                 "normalize": True, "batch_size": 2}, indent=1,
                                                ensure_ascii=False))


SOURCES = [[13, 7, 42, 19, 5, 1], [22, 8, 31, 1, 0, 0], [3, 44, 17, 29, 11, 1]]
TARGET = [[0, 9, 14, 27, 6, 33, 1]]  # teacher-forced decoder input (starts at decoder_start 0)


def seq2seq(name, model, root, src, tgt, gen_kw):
    d = root / name
    model.eval()
    model.save_pretrained(d)
    ids = torch.tensor(src)
    mask = (ids != model.config.pad_token_id).long()
    if name == "marian":
        mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 6])
    dec = torch.tensor(tgt).repeat(len(src), 1)

    def run(m):
        out = m(input_ids=ids, attention_mask=mask, decoder_input_ids=dec,
                output_hidden_states=True)
        return out.logits, out.encoder_last_hidden_state

    logits64, enc64 = f64(model, run)
    with torch.no_grad():
        logits32, _ = run(model)
        greedy = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, num_beams=1,
                                **gen_kw)
        beams = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, num_beams=4,
                               length_penalty=1.0, early_stopping=True, **gen_kw)
        beams_ngram = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                     num_beams=4, length_penalty=0.6, early_stopping=False,
                                     no_repeat_ngram_size=2, **gen_kw)
    save_file({"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec,
               "logits": logits64.contiguous(), "encoder_hidden": enc64.contiguous(),
               "logits_f32": logits32.contiguous()}, str(d / "expected.safetensors"))
    meta = {"generate": gen_kw, "greedy": greedy.tolist(), "beams4": beams.tolist(),
            "beam_settings": {"num_beams": 4, "length_penalty": 1.0, "early_stopping": True},
            "beams4_ngram": beams_ngram.tolist(),
            "beam_ngram_settings": {"num_beams": 4, "length_penalty": 0.6,
                                    "early_stopping": False, "no_repeat_ngram_size": 2},
            "note": "logits: float64 run of the saved float32 weights, teacher-forced"}
    (d / "expected.json").write_text(json.dumps(meta, indent=1))


def t5_family(root):
    from transformers import T5Config, T5ForConditionalGeneration
    common = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                  num_heads=4, relative_attention_num_buckets=8,
                  relative_attention_max_distance=20, pad_token_id=0, eos_token_id=1,
                  decoder_start_token_id=0, layer_norm_epsilon=1e-6,
                  initializer_factor=4.0)  # livelier than 1.0, whose outputs repeat one token
    for i, (name, extra) in enumerate({
            "t5-v1_0": {"feed_forward_proj": "relu", "tie_word_embeddings": True},
            "t5-v1_1": {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
            # Attention narrower (t5-v1_1-small, flan-t5-small) and wider (t5-3b) than the model.
            "t5-narrow": {"d_model": 64, "num_heads": 3, "d_kv": 16, "num_decoder_layers": 1,
                          "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
            "t5-wide": {"num_heads": 4, "d_kv": 16, "feed_forward_proj": "relu",
                        "tie_word_embeddings": True}}.items()):
        torch.manual_seed(300 + i)
        model = T5ForConditionalGeneration(T5Config(**{**common, **extra}))
        seq2seq(name, model, root, SOURCES, TARGET, {"max_new_tokens": 12})


def marian(root):
    from transformers import MarianConfig, MarianMTModel
    V = 64
    cfg = MarianConfig(vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2,
                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                       decoder_ffn_dim=64, max_position_embeddings=64,
                       activation_function="swish", scale_embedding=True, pad_token_id=V - 1,
                       init_std=0.25,  # the default 0.02 leaves the logits to the bias alone
                       eos_token_id=0, decoder_start_token_id=V - 1, forced_eos_token_id=0)
    torch.manual_seed(400)
    model = MarianMTModel(cfg)
    with torch.no_grad():  # a bias that is not zero, so that a loader that drops it fails
        model.final_logits_bias.normal_(0, 0.1)
    src = [[13, 7, 42, 19, 5, 0], [22, 8, 31, 0, V - 1, V - 1], [3, 44, 17, 29, 11, 0]]
    tgt = [[V - 1, 9, 14, 27, 6, 33, 0]]
    seq2seq("marian", model, root, src, tgt, {"max_new_tokens": 12})


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    try:
        import sentence_transformers
        versions["sentence_transformers"] = sentence_transformers.__version__
    except ImportError:
        pass
    failed = []
    for part in (bert_family, t5_family, marian):
        try:
            part(OUT)
            print(f"hf_fixtures: {part.__name__} done", flush=True)
        except Exception:  # noqa: BLE001 - write what can be written, say what failed
            failed.append(part.__name__)
            traceback.print_exc()
    (OUT / "versions.json").write_text(json.dumps(versions, indent=1))
    print("hf_fixtures:", versions, "failed:", failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
