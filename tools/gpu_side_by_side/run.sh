#!/usr/bin/env bash
# The side-by-side on a lent GPU: gpt2vk bench against Hugging Face transformers (PyTorch, fp16)
# on the same GPU and shapes, gpt2vk compare there, and the Hugging Face fixtures
# (tools/reference/hf_fixtures.py) saved by the libraries themselves. One call, about 6 minutes.
#
# Prepare here (Debian 12), then run there from the repository root:
#   tools/gpu_side_by_side/pack.sh            # a Release gpt2vk and its libraries into .gpubin/
#   device run, carry [".gpubin", ".gl"]:  bash tools/gpu_side_by_side/run.sh "$OUT"
# Writes into OUT: log.txt, engine.jsonl, torch.jsonl, profile.txt, hf_fixtures.tar.gz.
# SBS_QUICK=1: the engine (scalar tiles and matrix units) and PyTorch eager on each shape, the
# profiles, compare and the op tests only (no fixtures, training or torch.compile): about 4
# minutes. SBS_MERGE=0 leaves out the split attention's merge fused against apart (about a
# minute).
set -uo pipefail
out=${1:?usage: run.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
exec > >(tee -a "$out/log.txt") 2>&1
source "$here/device_env.sh"  # root, bin, lib, gv, say; the Vulkan driver found

quick=${SBS_QUICK:-0}
# The fixtures use the CPU only; they run beside the timings on a 16-core machine.
((quick)) || (CUDA_VISIBLE_DEVICES="" timeout 200 python3 "$root/tools/reference/hf_fixtures.py" /tmp/hf_fixtures \
   > /tmp/fixtures.log 2>&1; echo "fixtures exit $?" >> /tmp/fixtures.log) &
fixtures=$!

models=/tmp/models
mkdir -p "$models"
for s in ${SBS_SHAPES:-small medium xl}; do gv make-model --shape "$s" -o "$models/$s" || exit 1; done

bench() {  # shape, label, then bench's flags; GPT2VK_COOP_MATRIX from the caller
  local s=$1 label=$2; shift 2
  say "gpt2vk bench $s $label $*"
  timeout 150 env LD_LIBRARY_PATH="$lib" "$bin" bench -m "$models/$s" --json "$@" | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    print(json.dumps(dict(t, label=sys.argv[1], shape=sys.argv[2])))' "$label" "$s" \
    | tee -a "$out/engine.jsonl"
}
peer() {  # shape, mode, seconds allowed
  say "pytorch $1 $2"
  timeout "$3" python3 "$here/torch_peer.py" --shape "$1" --mode "$2" "${@:4}" \
    | tee -a "$out/torch.jsonl"
}

# The engine first, then PyTorch, shape by shape; the same tests on both.
for s in ${SBS_SHAPES:-small xl medium}; do
  r=5; [[ $s == xl ]] && r=3
  bench "$s" gpu -p 128,512 -n 128 -r "$r"
  GPT2VK_COOP_MATRIX=on bench "$s" coop -p 128,512 -n 0 -r "$r"
  peer "$s" eager 120 -r "$r"
done
if ((!quick)); then
  wait "$fixtures"
  cat /tmp/fixtures.log
  tar czf "$out/hf_fixtures.tar.gz" -C /tmp hf_fixtures

  say "training: GPT-2 small, 8 x 256 tokens a step, fp32 AdamW"
  gv train --init "$models/small/config.json" --data "$root/models/kjv/heldout.txt" --batch 8 \
    --ctx 256 --steps 7 --bench 2>&1 | tail -2
  peer small train 120 --batch 8 --ctx 256 -r 5
fi

# The split attention's merge in its own dispatch (the default) against attention_merge after
# it (GPT2VK_SPLIT_MERGE=apart), decode only, two rounds alternated.
for round in $( ((${SBS_MERGE:-1})) && echo 1 2); do
  for merge in apart fused; do
    GPT2VK_SPLIT_MERGE=$merge bench small "merge-$merge" -p 0 -n 128 -r 3
    GPT2VK_SPLIT_MERGE=$merge bench xl "merge-$merge" -p 0 -n 64 -r 3
  done
done

say "profiles"
bw=4800; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && bw=3350
for s in small xl; do
  gv bench -m "$models/$s" -p 512 -n 64 -r 1 --profile --bandwidth "$bw" >> "$out/profile.txt" 2>&1
  echo "== $s, matrix units" >> "$out/profile.txt"
  GPT2VK_COOP_MATRIX=on gv bench -m "$models/$s" -p 512 -n 0 -r 1 --profile --bandwidth "$bw" \
    >> "$out/profile.txt" 2>&1
done

say "compare (GPU set against the CPU reference; the matrix units at fp16's tolerance)"
for s in small medium; do
  timeout 60 env LD_LIBRARY_PATH="$lib" "$bin" compare -m "$models/$s" -p "The engine is checked against its reference on a GPU." ||
    echo "compare $s FAILED"
  timeout 60 env LD_LIBRARY_PATH="$lib" GPT2VK_COOP_MATRIX=on "$bin" compare -m "$models/$s" \
    --tolerance 1e-2 -p "The engine is checked against its reference on a GPU." ||
    echo "compare $s (matrix units) FAILED"
done
# The op tests on this GPU (a test binary carried by pack.sh --tests): the matrix units' kernels
# against the CPU reference, both tiles, and the tiled and GEMV kernels; the split attention
# with its merge fused (workgroups that run at once on a GPU, where lavapipe runs them in turn).
if [[ -x $root/.gpubin/gpt2vk_tests ]]; then
  say "op tests: matmul, attention_merge"
  timeout 150 env LD_LIBRARY_PATH="$lib" VK_LAYER_PATH="$root/.gpubin/lib/layer" \
    "$root/.gpubin/gpt2vk_tests" --source-file='*/test_matmul.cpp,*/test_attention_merge.cpp' ||
    echo "op tests FAILED"
fi

((quick)) && { say "done"; exit 0; }
# torch.compile last: it may take minutes, and the call must end inside its limit.
left() { ((SECONDS < ${SBS_DEADLINE:-300})) || { say "skipped: $*"; return 1; }; }
left "compiled small" && peer small compiled 120 --pp 0 -r 3
left "compiled xl" && peer xl compiled 120 --pp 0 -r 3
left "static small" && peer small static 60 --pp 0 -r 3
say "done"
