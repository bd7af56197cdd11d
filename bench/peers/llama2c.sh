#!/usr/bin/env bash
# loom against llama2.c's run.c (a forward pass with no graph at all) on
# stories260K: greedy generation of 256 tokens from BOS, one thread, in the
# same run: run.c, loom step_by_step and loom fused, interleaved round by
# round; medians of the generation rates and the ratios.
#
# run.c is built from a llama2.c checkout OUTSIDE this repository
# ($LLAMA2C_DIR: `git clone https://github.com/karpathy/llama2.c`), with the
# flags of its Makefile's `run` target (-O3, what its README builds), and for
# reference with those of `runomp` without OpenMP (-Ofast -march=native).
# It is never a dependency of loom.
#
# usage: LLAMA2C_DIR=... bench/peers/llama2c.sh [REPS=9] [STEPS=256]
#   LOOM=path/to/loom (default build/loom), LOOM_SHARED_DIR for the model
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS="${1:-9}"
STEPS="${2:-256}"
LOOM="${LOOM:-build/loom}"
SRC="${LLAMA2C_DIR:?set LLAMA2C_DIR to a llama2.c checkout (outside this repository)}"
S="${LOOM_SHARED_DIR:-$(cd .. && pwd)/shared}/models/stories260K"
case "$(realpath -m "$SRC")/" in
    "$(realpath .)"/*) echo "llama2c.sh: LLAMA2C_DIR must be outside the repository" >&2; exit 1 ;;
esac
[ -f "$SRC/run.c" ] || { echo "llama2c.sh: no run.c in $SRC" >&2; exit 1; }
[ -x "$LOOM" ] || { echo "llama2c.sh: no loom binary at $LOOM" >&2; exit 1; }
[ -f "$S/stories260K.bin" ] || { echo "llama2c.sh: no $S/stories260K.bin" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cc -O3 -o "$tmp/run_o3" "$SRC/run.c" -lm
cc -Ofast -march=native -o "$tmp/run_native" "$SRC/run.c" -lm

runc() { "$tmp/$1" "$S/stories260K.bin" -z "$S/tok512.bin" -t 0 -n "$STEPS" 2>&1 >/dev/null |
         sed -n 's/^achieved tok\/s: \([0-9.]*\).*/\1/p'; }
loom() { "$LOOM" run -m "$S/stories260K.bin" -z "$S/tok512.bin" --temp 0 -n "$STEPS" -t 1 --mode "$1" 2>&1 >/dev/null |
         sed -n 's/.*generation: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p'; }
for r in $(seq 1 "$REPS"); do
    runc run_o3 >>"$tmp/r_o3"
    runc run_native >>"$tmp/r_native"
    loom step_by_step >>"$tmp/r_step"
    loom fused >>"$tmp/r_fused"
done
median() { sort -g "$1" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
o3=$(median "$tmp/r_o3"); nat=$(median "$tmp/r_native"); st=$(median "$tmp/r_step"); fu=$(median "$tmp/r_fused")
echo "stories260K, greedy, $STEPS tokens from BOS, 1 thread; median of $REPS interleaved rounds"
grep -m1 "model name" /proc/cpuinfo | sed 's/.*: /cpu /'
echo "llama2.c: $(git -C "$SRC" log -1 --format='%h %cs' 2>/dev/null || echo "checkout $SRC")"
echo
echo "| program | generation tok/s (median) | loom fused / this |"
echo "|---|---:|---:|"
awk -v o3="$o3" -v nat="$nat" -v st="$st" -v fu="$fu" 'BEGIN {
    printf "| run.c, -O3 (its Makefile) | %.0f | %.2f |\n", o3, fu / o3
    printf "| run.c, -Ofast -march=native | %.0f | %.2f |\n", nat, fu / nat
    printf "| loom step_by_step | %.0f | %.2f |\n", st, fu / st
    printf "| loom fused | %.0f | 1.00 |\n", fu }'
