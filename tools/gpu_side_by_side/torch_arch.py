"""The peer of `gpt2vk bench` for encoders and encoder-decoders on the same GPU: Hugging Face
transformers in PyTorch, the model built from a `gpt2vk make-model` folder's config.json (the same
shape; random weights, which speed does not depend on).

The same tests as bench, measured the way bench measures them (apps/bench.cpp):
  encoder (BERT)     enc<P> [x<N>]: N sequences of P random ids in one forward of the base model
                     (BertModel, which sentence-transformers runs under its pooling), hidden states
                     only, synchronised; tokens/s = N * P / time.
  encoder-decoder    enc<P>: the encoder over P random source ids;
  (T5, Marian)       tg<N> @ src<P>: N greedy decoder steps through model.generate after such a
                     source, whose encoder output is given (not timed), no stop at eos.
Each in fp16 and in fp32 (sentence-transformers' default dtype); SDPA attention where the model
has it. The median of -r runs after two warm-ups. One JSON object per test on stdout.

    python3 torch_arch.py --model DIR [--pp 128] [--batch 32] [--tg 64] [-r 5]
"""
import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.modeling_outputs import BaseModelOutput


def sync():
    torch.cuda.synchronize()


def median_rate(fn, work, repeats):
    fn()
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(work / (time.perf_counter() - t0))
    return statistics.median(samples), samples


def build(cfg, seq2seq, dtype):
    torch.manual_seed(0)
    for attn in ("sdpa", "eager"):
        try:
            with torch.device("cuda"):
                cls = AutoModelForSeq2SeqLM if seq2seq else AutoModel
                m = cls.from_config(cfg, attn_implementation=attn)
            return m.to(dtype).eval(), attn
        except (ValueError, TypeError):
            continue
    raise RuntimeError("no attention implementation")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--pp", default="128")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--tg", default="64")
    ap.add_argument("-r", "--repeats", type=int, default=5)
    ap.add_argument("--dtypes", default="float16,float32")
    a = ap.parse_args()
    cfg = AutoConfig.from_pretrained(a.model)
    seq2seq = cfg.is_encoder_decoder
    vocab = cfg.vocab_size
    for dname in a.dtypes.split(","):
        model, attn = build(cfg, seq2seq, getattr(torch, dname))
        info = {"model": a.model, "model_type": cfg.model_type, "dtype": dname, "attn": attn,
                "torch": torch.__version__, "transformers": transformers.__version__,
                "device": torch.cuda.get_device_name()}

        def emit(test, rate, samples):
            print(json.dumps(dict(info, test=test, tokens_per_s=rate, samples=samples)),
                  flush=True)

        with torch.inference_mode():
            for P in [int(x) for x in a.pp.split(",") if int(x) > 0]:
                batches = [1] + ([int(x) for x in a.batch.split(",")] if a.batch and not seq2seq
                                 else [])
                for n in batches:
                    ids = torch.randint(5, vocab, (n, P), device="cuda")
                    mask = torch.ones_like(ids)
                    enc = model.get_encoder() if seq2seq else model
                    rate, s = median_rate(lambda: enc(input_ids=ids, attention_mask=mask),
                                          n * P, a.repeats)
                    emit(f"enc{P}" + (f" x{n}" if n > 1 else ""), rate, s)
                if not seq2seq:
                    continue
                src = torch.randint(5, vocab, (1, P), device="cuda")
                mask = torch.ones_like(src)
                hidden = model.get_encoder()(input_ids=src, attention_mask=mask).last_hidden_state
                for N in [int(x) for x in a.tg.split(",") if int(x) > 0]:
                    def greedy():
                        out = model.generate(
                            encoder_outputs=BaseModelOutput(last_hidden_state=hidden),
                            attention_mask=mask, max_new_tokens=N, min_new_tokens=N,
                            do_sample=False, num_beams=1, eos_token_id=None,
                            forced_eos_token_id=None, pad_token_id=cfg.pad_token_id)
                        assert out.shape[1] == N + 1, out.shape
                    rate, s = median_rate(greedy, N, a.repeats)
                    emit(f"tg{N} @ src{P}", rate, s)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
