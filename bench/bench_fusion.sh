#!/usr/bin/env bash
# `loom run` tokens/s in the three execution modes (step_by_step, fused,
# fused_with_checkpoints), median of REPS runs each, interleaved so machine
# drift hits every mode alike; ratios against step_by_step.
#   bench/bench_fusion.sh [LOOM] [MODEL] [TOKENIZER] [THREADS] [REPS]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
LOOM="${1:-$here/build/loom}"
MODEL="${2:-$here/../shared/models/stories260K/stories260K.bin}"
TOK="${3:-$here/../shared/models/stories260K/tok512.bin}"
THREADS="${4:-1}"
REPS="${5:-7}"
PROMPT="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree and wanted to"
modes="step_by_step fused fused_with_checkpoints"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$REPS"); do
    for m in $modes; do
        "$LOOM" run -m "$MODEL" -z "$TOK" -p "$PROMPT" -n 200 --temp 0 -t "$THREADS" --mode "$m" \
            2>>"$tmp/$m" >/dev/null
    done
done
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "| mode | threads | prompt tok/s (median) | generation tok/s (median) | prompt x | generation x |"
echo "|---|---|---|---|---|---|"
for m in $modes; do
    pp=$(sed -n 's/^prompt: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$tmp/$m" | median)
    tg=$(sed -n 's/.*generation: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$tmp/$m" | median)
    [ "$m" = step_by_step ] && { bp=$pp; bg=$tg; }
    echo "| $m | $THREADS | $pp | $tg | $(awk -v a="$pp" -v b="$bp" 'BEGIN{printf "%.2f", a/b}') | $(awk -v a="$tg" -v b="$bg" 'BEGIN{printf "%.2f", a/b}') |"
done
