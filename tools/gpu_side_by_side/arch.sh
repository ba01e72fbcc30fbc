#!/usr/bin/env bash
# Encoders and encoder-decoders side by side on a lent GPU: gpt2vk bench against Hugging Face
# transformers (torch_arch.py) on the same GPU, on make-model checkpoints of the users' shapes:
# MiniLM-L6 and bert-base (embed's batches of 32), t5-small and opus-mt's Marian (a 128-token
# source, 64 greedy steps). About 2 minutes. Prepare with pack.sh; run from the repository root:
#   bash tools/gpu_side_by_side/arch.sh OUT_DIR
# Writes into OUT: arch_log.txt, arch_engine.jsonl, arch_torch.jsonl.
set -uo pipefail
out=${1:?usage: arch.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
exec > >(tee -a "$out/arch_log.txt") 2>&1
source "$here/device_env.sh"

models=/tmp/arch_models
for spec in "bert minilm" "bert base" "t5 small" "marian base"; do
  read -r arch shape <<< "$spec"
  d=$models/$arch-$shape
  gv make-model --arch "$arch" --shape "$shape" -o "$d" > /dev/null || { say "make-model $spec FAILED"; continue; }
  say "gpt2vk bench $arch $shape"
  if [[ $arch == bert ]]; then flags=(-p 128 --batch 32); else flags=(-p 128 -n 64); fi
  timeout 120 env LD_LIBRARY_PATH="$lib" "$bin" bench -m "$d" --json "${flags[@]}" -r 5 |
    python3 -c '
import json, sys
for t in json.load(sys.stdin):
    print(json.dumps(dict(t, model=sys.argv[1])))' "$arch-$shape" | tee -a "$out/arch_engine.jsonl"
  say "pytorch $arch $shape"
  timeout 120 python3 "$here/torch_arch.py" --model "$d" --pp 128 --batch 32 --tg 64 -r 5 |
    tee -a "$out/arch_torch.jsonl"
done
say "arch done"
