#!/usr/bin/env bash
# Prompt and generation tokens/s of `loom run` with the reference kernels
# (LOOM_ISA=ref) and with the optimised kernels of this machine, same process
# conditions, median of REPS runs each (interleaved so drift hits both).
#   bench/bench_model.sh [LOOM] [MODEL] [TOKENIZER] [THREADS] [REPS]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
LOOM="${1:-$here/build/loom}"
MODEL="${2:-$here/../shared/models/stories260K/stories260K.bin}"
TOK="${3:-$here/../shared/models/stories260K/tok512.bin}"
THREADS="${4:-1}"
REPS="${5:-7}"
PROMPT="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree and wanted to"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$REPS"); do
    for isa in ref default; do
        if [ "$isa" = ref ]; then env LOOM_ISA=ref "$LOOM" run -m "$MODEL" -z "$TOK" -p "$PROMPT" -n 200 --temp 0 -t "$THREADS" 2>>"$tmp/$isa" >/dev/null
        else env -u LOOM_ISA "$LOOM" run -m "$MODEL" -z "$TOK" -p "$PROMPT" -n 200 --temp 0 -t "$THREADS" 2>>"$tmp/$isa" >/dev/null; fi
    done
done
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "| kernels | threads | prompt tokens | prompt tok/s (median) | generation tok/s (median) |"
echo "|---|---|---|---|---|"
for isa in ref default; do
    np=$(sed -n 's/^prompt: \([0-9]*\) tokens.*/\1/p' "$tmp/$isa" | head -1)
    pp=$(sed -n 's/^prompt: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$tmp/$isa" | median)
    tg=$(sed -n 's/.*generation: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$tmp/$isa" | median)
    name=$([ "$isa" = ref ] && echo "reference (LOOM_ISA=ref)" || echo "optimised (default level)")
    echo "| $name | $THREADS | $np | $pp | $tg |"
done
