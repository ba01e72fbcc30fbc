#!/usr/bin/env bash
# Training on a lent GPU (issue 34): tools/reference/grad_check.py's one-step gradient checks
# under both kernel sets at the shapes users train, and a fine-tuning run of GPT-2 small's shape
# beside PyTorch's float32 training of the same checkpoint, data and schedule
# (tools/reference/train_ref.py on CUDA); the Hugging Face fixtures beside them. About 3 minutes.
#
# Prepare here: tools/gpu_side_by_side/pack.sh; then there, from the repository root:
#   device run, carry [".gpubin", ".gl"]:  bash tools/gpu_side_by_side/train_check.sh "$OUT"
# Writes into OUT: log.txt, gpt2vk_train.jsonl, torch_train.json, hf_fixtures.tar.gz.
# TC_PARTS picks among "fixtures grads finetune" (all by default); FT_DTYPES the PyTorch runs
# beside gpt2vk's ("float32" by default; "float64" gives the float32 noise's scale, written as
# torch_train_float64.json).
set -uo pipefail
out=${1:?usage: train_check.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
exec > >(tee -a "$out/log.txt") 2>&1
source "$here/device_env.sh"  # root, bin, lib, gv, say; the Vulkan driver found
ref=$root/tools/reference
data=$root/models/kjv/heldout.txt

parts=${TC_PARTS:-fixtures grads finetune}
part() { [[ " $parts " == *" $1 "* ]]; }
fixtures=
if part fixtures; then
  (CUDA_VISIBLE_DEVICES="" timeout 200 python3 "$ref/hf_fixtures.py" /tmp/hf_fixtures \
     > /tmp/fixtures.log 2>&1; echo "fixtures exit $?" >> /tmp/fixtures.log) &
  fixtures=$!
fi

# grad_check.py runs gpt2vk as a program: this one carries the libraries.
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$lib" "$bin" > /tmp/gpt2vk
chmod +x /tmp/gpt2vk
for k in gpu cpu; do
  part grads || break
  say "one-step gradients, $k kernels"
  # head dims 32, 128 (an untied head of 50,257 x 512) and 64 (GPT-2 small's width), 4 x 64
  CUDA_VISIBLE_DEVICES="" python3 "$ref/grad_check.py" --gpt2vk /tmp/gpt2vk --data "$data" \
    --kernels "$k" --batch 4 --ctx 64 --shape 128,4,2,50257,tied --shape 512,4,2,50257,untied \
    --shape 768,12,2,50257,tied --shape 256,2,2,256,tied
  CUDA_VISIBLE_DEVICES="" python3 "$ref/grad_check.py" --gpt2vk /tmp/gpt2vk --data "$data" \
    --kernels "$k" --batch 1 --ctx 1024 --shape 128,2,2,256,tied
done

if part finetune; then
  say "fine-tuning: GPT-2 small's shape, 300 steps of 4 x 256, AdamW, warm-up and cosine decay"
  ft=/tmp/ft
  gv make-model --shape small --dtype f32 -o $ft/model
  flags=(--batch 4 --ctx 256 --steps 300 --lr 6e-4 --warmup 10 --lr-min 6e-5)
  if [[ " ${FT_DTYPES:-float32} " == *" float32 "* ]]; then
    gv train -m $ft/model --data "$data" "${flags[@]}" --cosine --log "$out/gpt2vk_train.jsonl" \
      -o $ft/out 2>&1 | grep -E "^train|step (1|100|200|300)/"
  fi
  gv tokenize -m $ft/model -f "$data" -o $ft/ids.bin
  for dt in ${FT_DTYPES:-float32}; do
    name=torch_train.json; [[ $dt == float32 ]] || name=torch_train_$dt.json
    python3 "$ref/train_ref.py" --checkpoint $ft/model --ids $ft/ids.bin --out $ft/ref_$dt \
      "${flags[@]}" --dtype "$dt" --device cuda --no-grads && cp $ft/ref_$dt/trajectory.json "$out/$name"
  done
fi

if [[ -n $fixtures ]]; then
  wait "$fixtures"
  cat /tmp/fixtures.log | grep -E "hf_fixtures|Error|exit"
  tar czf "$out/hf_fixtures.tar.gz" -C /tmp hf_fixtures
fi
say "done"
