#!/usr/bin/env bash
# Runs each libFuzzer target of fuzz/ for a given time and prints, per target, the executions,
# executions per second, coverage (libFuzzer's cov: edges and ft: features), the corpus reached
# and the outcome. Exits non-zero when any target finds a crash, a sanitizer report, a timeout,
# an out-of-memory or a broken property; the input that did it is saved and named.
#
#   scripts/fuzz.sh [-t SECONDS] [-b BUILD_DIR] [-j JOBS] [--nice] [TARGET...]
#
#   -t SECONDS   time per target (default 60)
#   -b DIR       the build folder (default build-fuzz); configured with clang and
#                -DGPT2VK_FUZZ=ON when it does not exist yet, and the targets are (re)built
#   -j JOBS      targets run at once (default 1)
#   --nice       run the targets at the lowest CPU priority (nice -n 19)
#   TARGET       config, gpt2_vocab, request, run_state, safetensors, tokenizer
#                (fuzz/fuzz_<target>.cpp; default: all)
#
# The corpus each target grows is kept in DIR/fuzz-work/<target>/corpus (the next run starts
# from it); the seeds in fuzz/corpus/<target> are read, never written, and fuzz/<target>.dict
# is the mutator's dictionary. Logs and any failing input are in DIR/fuzz-work/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
build=build-fuzz
jobs=1
nice_cmd=()
targets=()
while (($#)); do
  case "$1" in
    -t) seconds="$2"; shift 2 ;;
    -b) build="$2"; shift 2 ;;
    -j) jobs="$2"; shift 2 ;;
    --nice) nice_cmd=(nice -n 19); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  for f in fuzz/fuzz_*.cpp; do f=${f#fuzz/fuzz_}; targets+=("${f%.cpp}"); done
fi
for t in "${targets[@]}"; do
  [[ -f fuzz/fuzz_$t.cpp ]] || { echo "fuzz.sh: no target '$t' (no fuzz/fuzz_$t.cpp)" >&2; exit 2; }
done

if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DGPT2VK_FUZZ=ON
fi
cmake --build "$build" --target fuzz -j"$(nproc)"

# One target: libFuzzer with a time budget; a slow input (10 s) or one using more than 2 GiB is
# a finding too. The output goes to its log.
run_one() {
  local t="$1" work="$build/fuzz-work/$1"
  mkdir -p "$work/corpus" "$work/artifacts"
  local rc=0 dict=()
  [[ -f fuzz/$t.dict ]] && dict=(-dict="fuzz/$t.dict")  # the format's words, for the mutator
  # -max_len: room for tensors past the conversions' 4096-value chunks, and for long texts.
  "${nice_cmd[@]}" "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -max_len=16384 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${dict[@]}" \
    "$work/corpus" "fuzz/corpus/$t" >"$work/log" 2>&1 || rc=$?
  echo "$rc" >"$work/rc"
}

running=0
for t in "${targets[@]}"; do
  echo "fuzz.sh: $t for ${seconds}s ($build/fuzz-work/$t/log)"
  run_one "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

# The summary, from libFuzzer's final statistics and its last status line.
failed=0
printf '\n%-12s %10s %8s %6s %7s %14s  %s\n' target execs exec/s cov ft corpus result
for t in "${targets[@]}"; do
  work="$build/fuzz-work/$t"
  rc=$(cat "$work/rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
  status=$(grep -E '^#[0-9]+[[:space:]].*cov: ' "$work/log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$status")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$status")
  corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$status")
  result=ok
  if [[ $rc != 0 ]]; then
    failed=1
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$work/log" | tail -1)
    result="FAILED (exit $rc): ${artifact:-see $work/log}"
  fi
  printf '%-12s %10s %8s %6s %7s %14s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
    "${ft:-?}" "${corp:-?}" "$result"
done
if ((failed)); then
  echo "fuzz.sh: a target failed; replay its input with $build/fuzz/fuzz_<target> <input>" >&2
  exit 1
fi
