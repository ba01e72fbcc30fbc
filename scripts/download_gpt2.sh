#!/usr/bin/env bash
# Downloads an OpenAI GPT-2 checkpoint as Hugging Face publishes it (openai-community/<name>):
# config.json, model.safetensors, vocab.json, merges.txt, and generation_config.json and
# tokenizer.json where present. Files already there are kept; an interrupted download resumes
# from its .part file when the script is run again.
#
# Usage: scripts/download_gpt2.sh [gpt2|gpt2-medium|gpt2-large|gpt2-xl] [DIR]
#   DIR defaults to models/<name>. HF_ENDPOINT overrides https://huggingface.co (a mirror).
set -euo pipefail

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }

name=${1:-gpt2}
case "$name" in
  gpt2 | gpt2-medium | gpt2-large | gpt2-xl) ;;
  -h | --help) usage; exit 0 ;;
  *) echo "download_gpt2: unknown model '$name' (gpt2, gpt2-medium, gpt2-large or gpt2-xl)" >&2; exit 2 ;;
esac
dir=${2:-models/$name}
base="${HF_ENDPOINT:-https://huggingface.co}/openai-community/$name/resolve/main"

if ! command -v curl >/dev/null 2>&1; then
  echo "download_gpt2: curl is not installed (Debian: apt-get install curl)" >&2
  exit 1
fi
mkdir -p "$dir"

# fetch FILE required|optional
fetch() {
  local file=$1 need=$2 out="$dir/$1" rc=0 quiet=(--silent --show-error)
  if [[ -s "$out" ]]; then
    echo "have  $out"
    return 0
  fi
  echo "fetch $base/$file"
  [[ $file == model.safetensors ]] && quiet=(--progress-bar)
  # --fail: an HTTP error is an error, not a saved error page. --continue-at -: resume .part.
  curl --fail --location --retry 3 --retry-delay 2 --continue-at - "${quiet[@]}" \
    --output "$out.part" "$base/$file" || rc=$?
  case $rc in
    0) mv "$out.part" "$out" ;;
    6 | 7 | 28)
      echo "download_gpt2: cannot reach ${base%%/openai-community*} (no internet connection, or a proxy needed?)" >&2
      exit 1 ;;
    22)  # HTTP error (e.g. 404)
      rm -f "$out.part"
      if [[ $need == optional ]]; then
        echo "      (not published for $name: skipped)"
        return 0
      fi
      echo "download_gpt2: $base/$file: HTTP error; nothing saved" >&2
      exit 1 ;;
    33)  # the server would not resume the .part file: start over
      rm -f "$out.part"
      echo "      (could not resume: downloading $file from the start)"
      fetch "$file" "$need" ;;
    *)
      echo "download_gpt2: $base/$file: curl failed (exit $rc); run again to resume from $out.part" >&2
      exit 1 ;;
  esac
}

fetch config.json required
fetch vocab.json required
fetch merges.txt required
fetch generation_config.json optional
fetch tokenizer.json optional
fetch model.safetensors required

echo "done: $dir"
