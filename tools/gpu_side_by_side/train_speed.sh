#!/usr/bin/env bash
# Training speed on a lent GPU (issue 41, item 5): GPT-2 small's shape, 8 x 1024 tokens a step,
# AdamW, gpt2vk train --bench (GPU kernel set; with and without --recompute where the binary has
# it) beside PyTorch's training of the same shape in float32 (TF32 off, as gpt2vk) and under
# autocast bf16; tokens/s, model FLOPs utilisation and peak memory of each, then the GPU time of
# each op kind in gpt2vk's step (--profile), which says which training kernels cost most.
# About 3 minutes.
#
# Prepare here: tools/gpu_side_by_side/pack.sh; then there, from the repository root:
#   device run, carry [".gpubin", ".gl"]:  bash tools/gpu_side_by_side/train_speed.sh "$OUT"
# Writes into OUT: log.txt, train_speed.jsonl (one object per run), train_profile.txt.
set -uo pipefail
out=${1:?usage: train_speed.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
exec > >(tee -a "$out/log.txt") 2>&1
source "$here/device_env.sh"  # root, bin, lib, gv, say; the Vulkan driver found

B=${TS_BATCH:-8} T=${TS_CTX:-1024} steps=${TS_STEPS:-6}
# gpt2vk takes the step as --grad-accum micro-batches of one sequence: 8 x 1,024 rows of GPT-2's
# 50,257 logits (1.5 GiB in fp32) are past the trainer's 1 GiB allocation; one sequence's are
# 0.2 GiB. The same tokens a step, and the same update to float rounding (docs/training.md).
GB=${TS_MICRO:-1}
models=/tmp/models
gv make-model --shape small -o "$models/small" || exit 1
# The held-out KJV text in GPT-2's tokens is about 10,000 tokens: enough random windows of 1,025.
data=$root/models/kjv/heldout.txt

engine() {  # label, then train's extra flags
  local label=$1; shift
  say "gpt2vk train $label: $((B / GB)) x $GB x $T, $steps steps"
  timeout 240 env LD_LIBRARY_PATH="$lib" "$bin" train --init "$models/small/config.json" \
    --data "$data" --batch "$GB" --grad-accum $((B / GB)) --ctx "$T" --steps "$steps" --bench \
    --kernels gpu "$@" \
    > /tmp/train_$label.txt 2>&1
  echo "exit $?"; tail -4 /tmp/train_$label.txt
  # "train: P parameters, B x T tokens per step on DEVICE: N tokens/s (M ms per step, ...)"
  python3 - "$label" /tmp/train_$label.txt <<'EOF' >> "$out/train_speed.jsonl"
import json, re, sys
text = open(sys.argv[2]).read()
m = re.search(r"([\d.]+) tokens/s \(([\d.]+) ms per step", text)
peak = re.search(r"peak[^\n]*?([\d.,]+) (MiB|GiB|MB|GB)", text)
rec = {"engine": "gpt2vk", "label": sys.argv[1]}
if m:
    rec.update(median_ts=float(m.group(1)), ms_per_step=float(m.group(2)))
else:
    rec["error"] = text[-500:]
if peak:
    rec["peak"] = peak.group(0)
print(json.dumps(rec))
EOF
}

engine gpu
if gv train --help | grep -q -- --recompute; then engine recompute --recompute; fi

for amp in none bf16; do
  say "pytorch train $B x $T, amp $amp"
  flag=(); [[ $amp == bf16 ]] && flag=(--amp bf16)
  timeout 240 python3 "$here/torch_peer.py" --shape small --mode train --batch "$B" --ctx "$T" \
    -r 4 "${flag[@]}" | tee -a "$out/train_speed.jsonl"
done

say "gpt2vk train --profile (the last of 3 steps)"
timeout 120 env LD_LIBRARY_PATH="$lib" "$bin" train --init "$models/small/config.json" \
  --data "$data" --batch "$GB" --grad-accum $((B / GB)) --ctx "$T" --steps 3 --bench --profile \
  --kernels gpu \
  > "$out/train_profile.txt" 2>&1
echo "exit $?"; tail -40 "$out/train_profile.txt"

say "summary"
python3 - "$out/train_speed.jsonl" <<'EOF'
# Model FLOPs utilisation against the GPU's dense peak for the arithmetic each run uses: fp32
# without tensor cores for gpt2vk (its GPU set's training kernels are fp32) and PyTorch float32
# (TF32 off), bf16 tensor cores for autocast. H100 SXM and H200: 67 and 989 TFLOP/s (NVIDIA's
# data sheets, dense).
import json, subprocess, sys
name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                      capture_output=True, text=True).stdout.strip()
peaks = {"fp32": 67e12, "bf16": 989e12}
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
flops = next((r["flops_per_token"] for r in rows if "flops_per_token" in r), None)
torch32 = next((r["median_ts"] for r in rows
                if r.get("engine") == "pytorch" and r.get("amp") == "none" and "median_ts" in r), None)
print(f"{name}; model FLOPs per token {flops}")
for r in rows:
    if "median_ts" not in r:
        print(r); continue
    kind = "bf16" if r.get("amp") == "bf16" else "fp32"
    label = r.get("label") or f"pytorch amp={r.get('amp')}"
    mfu = r["median_ts"] * flops / peaks[kind] if flops else float("nan")
    ratio = r["median_ts"] / torch32 if torch32 else float("nan")
    print(f"{r['engine']:8} {label:18} {r['median_ts']:10.0f} tok/s  MFU {100*mfu:5.1f}% of {kind}"
          f"  x{ratio:.2f} of PyTorch fp32  peak {r.get('peak_mib', r.get('peak', '?'))}")
EOF
