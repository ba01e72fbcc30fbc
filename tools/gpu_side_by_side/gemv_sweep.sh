#!/usr/bin/env bash
# The decode GEMV's workgroup shapes on a lent GPU (the tuning table's gemv_workgroup and
# gemv_outs, forced with GPT2VK_GEMV=WGxOUTS): gpt2vk bench tg on GPT-2 small and XL for each,
# alternated in rounds, with compare on small for each shape. About 2 minutes.
#   device run, carry [".gpubin", ".gl"]:  bash tools/gpu_side_by_side/gemv_sweep.sh "$OUT"
# Writes OUT/gemv.jsonl (bench's JSON with the shape) and the log.
set -uo pipefail
out=${1:?usage: gemv_sweep.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
exec > >(tee -a "$out/log.txt") 2>&1
source "$here/device_env.sh"
shapes=${GEMV_SHAPES:-32x2 64x2 128x2 32x4 64x4 128x4 128x1}
models=/tmp/models
mkdir -p $models
for s in small xl; do [[ -d $models/$s ]] || gv make-model --shape $s -o $models/$s; done
for round in 1 2; do
  for shape in $shapes; do
    for s in small xl; do
      n=128; [[ $s == xl ]] && n=64
      say "round $round: GEMV $shape, $s tg$n"
      GPT2VK_GEMV=$shape gv bench -m $models/$s -p 0 -n $n -r 3 --json | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    print(json.dumps(dict(t, gemv=sys.argv[1], round=int(sys.argv[2]))))' "$shape" "$round" \
        | tee -a "$out/gemv.jsonl"
    done
  done
done
say "compare on small, each shape"
for shape in $shapes; do
  GPT2VK_GEMV=$shape timeout 60 env LD_LIBRARY_PATH="$lib" "$bin" compare -m $models/small \
    -p "The engine is checked against its reference on a GPU." | tail -1 | sed "s/^/$shape: /"
done
say "done"
