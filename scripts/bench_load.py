#!/usr/bin/env python3
"""Load on `gpt2vk serve`: two replicas behind HAProxy against one replica alone.

Starts two `gpt2vk serve` replicas (`--parallel 8`) and HAProxy with deploy/haproxy.cfg as
shipped but for its ports (its `bind` lines and `server` lines replaced by free loopback ones,
as tests/test_serve_ha.cpp does), then 32 clients that each send streamed completions one
after another for 60 s through HAProxy; then the same load on one replica alone, directly.
Each request is a greedy completion of `--max-tokens` tokens of one of 16 prompts (`"stream":
true`): its time to first token is the time until its first event with text, seen by the
client. Prints, for each setup, requests/s, tokens/s (from the replicas' own
`gpt2vk_completion_tokens_total`), p50/p99 time to first token, the errors, the CPU time the
replicas used (all their threads, lavapipe's too: on a shared machine, what the load got of
it), and each replica's resident memory (VmRSS) before and after the load, after a warm-up that
fills every slot once. Requests still running at the end of the window finish and count; rates
are over the time until the last one finished.

    ./build/gpt2vk make-model --shape small -o /tmp/gpt2-small
    python3 scripts/bench_load.py -m models/kjv
    python3 scripts/bench_load.py -m /tmp/gpt2-small
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ["And God said", "In the beginning", "Blessed are the meek", "Thou shalt not",
           "And it came to pass", "The LORD is my shepherd", "Behold, I stand at the door",
           "And Moses went up", "Now the serpent was", "For God so loved",
           "Honour thy father", "And the earth was", "Let there be light", "I am the way",
           "Remember the sabbath day", "And Jesus answered"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=5):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_up(port, proc, what, seconds=900):
    for _ in range(seconds * 2):
        try:
            if get(port, "/health")[0] == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None:
            sys.exit(f"{what} exited ({proc.returncode})")
        time.sleep(0.5)
    sys.exit(f"{what} did not come up")


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid):
    """User plus system CPU time of a process, all its threads (lavapipe's too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tokens_total(port):
    text = get(port, "/metrics")[1]
    m = re.search(r"^gpt2vk_completion_tokens_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def haproxy_config(frontend, stats, replicas):
    cfg = (ROOT / "deploy/haproxy.cfg").read_text()
    for old, new in (("bind :8080", f"bind 127.0.0.1:{frontend}"),
                     ("bind 127.0.0.1:8404", f"bind 127.0.0.1:{stats}")):
        if old not in cfg:
            sys.exit(f"deploy/haproxy.cfg has no '{old}'")
        cfg = cfg.replace(old, new, 1)
    servers = "".join(f"    server replica{i + 1} 127.0.0.1:{p}\n" for i, p in enumerate(replicas))
    cfg, n = re.subn(r"(    server replica\d+ [^\n]*\n)+", servers, cfg, count=1)
    if n != 1:
        sys.exit("deploy/haproxy.cfg has no server lines to replace")
    return cfg


def one_request(port, prompt, max_tokens):
    """(time to first token, whether it ended with [DONE]) of one streamed completion."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    first, done = None, False
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    continue
                event = json.loads(data)
                if first is None and "choices" in event and event["choices"][0].get("text"):
                    first = time.monotonic() - t0
    except OSError:
        return None, False
    return first, done


def load(port, clients, seconds, max_tokens):
    ttft, counts = [], {"ok": 0, "errors": 0}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(c):
        i = c
        while time.monotonic() < deadline:
            first, ok = one_request(port, PROMPTS[i % len(PROMPTS)], max_tokens)
            i += clients
            with lock:
                counts["ok" if ok else "errors"] += 1
                if ok and first is not None:
                    ttft.append(first)

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - start, ttft, counts


def quantile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def run_setup(a, name, n_replicas, through_haproxy, tmp):
    replicas = []
    try:
        for i in range(n_replicas):
            port = free_port()
            log = open(Path(tmp) / f"{name}-replica{i + 1}.log", "w")
            proc = subprocess.Popen([a.gpt2vk, "serve", "-m", a.model, "--port", str(port),
                                     "--parallel", str(a.parallel), "--max-queue", "64"]
                                    + a.serve_args, stderr=log)
            replicas.append((port, proc))
        for i, (port, proc) in enumerate(replicas):
            wait_up(port, proc, f"replica {i + 1}")
        haproxy = None
        port = replicas[0][0]
        if through_haproxy:
            port, stats = free_port(), free_port()
            cfg = Path(tmp) / "haproxy.cfg"
            cfg.write_text(haproxy_config(port, stats, [p for p, _ in replicas]))
            haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(60):
                time.sleep(0.5)
                try:
                    csv = get(stats, "/stats;csv")[1]
                except OSError:
                    continue
                if csv.count(",UP,") >= n_replicas + 1:  # the servers and the backend
                    break
            else:
                sys.exit("HAProxy's checks never saw every replica UP")
        # Each replica's slots all used once first (--parallel requests at once): the pipelines'
        # first use and the first touch of every slot's KV cache fall outside the window, so
        # that RSS at the start is the steady state's.
        warm = [threading.Thread(target=one_request, args=(p, PROMPTS[i], a.max_tokens))
                for p, _ in replicas for i in range(a.parallel)]
        for t in warm:
            t.start()
        for t in warm:
            t.join()
        rss_start = [rss_mib(proc.pid) for _, proc in replicas]
        tok_start = [tokens_total(p) for p, _ in replicas]
        cpu_start = sum(cpu_seconds(proc.pid) for _, proc in replicas)
        elapsed, ttft, counts = load(port, a.clients, a.seconds, a.max_tokens)
        cpu = sum(cpu_seconds(proc.pid) for _, proc in replicas) - cpu_start
        tokens = sum(tokens_total(p) for p, _ in replicas) - sum(tok_start)
        rss_end = [rss_mib(proc.pid) for _, proc in replicas]
        if haproxy:
            haproxy.terminate()
            haproxy.wait()
    finally:
        for _, proc in replicas:
            proc.terminate()
        for _, proc in replicas:
            proc.wait()
    rss = ", ".join(f"replica {i + 1} {s:.0f} -> {e:.0f} MiB ({(e / s - 1) * 100:+.1f}%)"
                    for i, (s, e) in enumerate(zip(rss_start, rss_end)))
    print(f"{name}: {counts['ok']} requests in {elapsed:.1f} s, {counts['errors']} errors; "
          f"{counts['ok'] / elapsed:.2f} requests/s, {tokens / elapsed:.1f} tokens/s; "
          f"time to first token "
          f"p50 {quantile(ttft, 0.5) * 1000:.0f} ms, p99 {quantile(ttft, 0.99) * 1000:.0f} ms; "
          f"replicas' CPU {cpu:.0f} s ({cpu / elapsed:.2f} cores, {tokens / cpu:.0f} tokens per "
          f"CPU second); RSS {rss}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default=str(ROOT / "models/kjv"))
    ap.add_argument("--gpt2vk", default=str(ROOT / "build/gpt2vk"))
    ap.add_argument("--clients", type=int, default=32, help="concurrent clients (32)")
    ap.add_argument("--seconds", type=float, default=60, help="each setup's load (60)")
    ap.add_argument("--parallel", type=int, default=8, help="each replica's --parallel (8)")
    ap.add_argument("--max-tokens", type=int, default=32, help="each request's tokens (32)")
    ap.add_argument("--one-first", action="store_true", help="one replica first, then two")
    ap.add_argument("serve_args", nargs="*", help="more `gpt2vk serve` options, after --")
    a = ap.parse_args()
    print(f"{a.model}: {a.clients} clients for {a.seconds:.0f} s, --parallel {a.parallel}, "
          f"{a.max_tokens} tokens a request", flush=True)
    setups = [("two replicas behind HAProxy", 2, True), ("one replica alone", 1, False)]
    if a.one_first:
        setups.reverse()
    with tempfile.TemporaryDirectory() as tmp:
        for name, n, through_haproxy in setups:
            run_setup(a, name, n, through_haproxy, tmp)


if __name__ == "__main__":
    main()
