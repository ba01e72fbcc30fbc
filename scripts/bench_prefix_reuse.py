#!/usr/bin/env python3
"""Time to first token with and without prompt-prefix reuse in `gpt2vk serve`.

Starts one server and sends, in each round, N requests (default 8) whose prompts share a prefix
of P token ids (default 400) and end in S ids of their own (default 16), one after another, each
asking for one token: once with prompt-prefix reuse (the first request computes the prefix, the
others take it from the slot's cache) and once with `"cache_prompt": false` (every prompt
computed whole), the two in alternating order from round to round. A request's time to first
token is its wall time seen by the client (one token asked for: the answer follows it at once).
Each round uses a prefix of its own, and a request with an unrelated prompt goes first in each
half, so nothing is reused across rounds or halves. Prints each round and the medians.

    ./build/gpt2vk make-model --shape small -o /tmp/gpt2-small
    python3 scripts/bench_prefix_reuse.py -m /tmp/gpt2-small
"""
import argparse
import json
import random
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        reply = json.load(r)
    return time.monotonic() - t0, reply


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="a model folder with a context of at "
                    "least prefix + suffix + 1 tokens (make-model --shape small: 1024)")
    root = Path(__file__).resolve().parent.parent
    ap.add_argument("--gpt2vk", default=str(root / "build/gpt2vk"))
    ap.add_argument("--prefix", type=int, default=400, help="shared prompt tokens (400)")
    ap.add_argument("--suffix", type=int, default=16, help="each request's own tokens (16)")
    ap.add_argument("--requests", type=int, default=8, help="requests sharing a prefix (8)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of both halves (3)")
    ap.add_argument("serve_args", nargs="*", help="more `gpt2vk serve` options, after --")
    a = ap.parse_args()
    vocab = json.loads((Path(a.model) / "config.json").read_text()).get("vocab_size", 50257)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([a.gpt2vk, "serve", "-m", a.model, "--port", str(port)]
                              + a.serve_args, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=5).read()
                break
            except OSError:
                if server.poll() is not None:
                    sys.exit("gpt2vk serve exited")
                time.sleep(0.5)
        rng = random.Random(1)
        ids = lambda n: [rng.randrange(vocab) for _ in range(n)]
        ask = lambda prompt, reuse: post(url, {"prompt": prompt, "max_tokens": 1,
                                               "temperature": 0, "cache_prompt": reuse})
        ask(ids(a.prefix + a.suffix), True)  # warm-up: first-use pipelines
        firsts = {True: [], False: []}
        rest = {True: [], False: []}
        for r in range(a.rounds):
            line = []
            for reuse in ((True, False) if r % 2 == 0 else (False, True)):
                ask(ids(a.prefix + a.suffix), True)  # the slot holds something unrelated
                prefix = ids(a.prefix)
                times, cached = [], []
                for _ in range(a.requests):
                    t, reply = ask(prefix + ids(a.suffix), reuse)
                    times.append(t)
                    cached.append(reply["usage"]["prompt_tokens_details"]["cached_tokens"])
                firsts[reuse].append(times[0])
                rest[reuse].extend(times[1:])
                line.append(f"{'reuse' if reuse else 'whole'}: first {times[0]*1000:.0f} ms, "
                            f"others median {statistics.median(times[1:])*1000:.0f} ms "
                            f"(cached tokens {cached})")
            print(f"round {r + 1}: " + "; ".join(line), flush=True)
        w, u = statistics.median(rest[False]), statistics.median(rest[True])
        print(f"requests 2..{a.requests}, median time to first token: whole {w*1000:.0f} ms, "
              f"reused {u*1000:.0f} ms, ratio {w/u:.2f}")
        print(f"request 1 (computes the prefix either way), median: whole "
              f"{statistics.median(firsts[False])*1000:.0f} ms, reuse "
              f"{statistics.median(firsts[True])*1000:.0f} ms")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
