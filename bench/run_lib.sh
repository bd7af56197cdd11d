# shellcheck shell=bash disable=SC2034
# Shared part of bench_model.sh and bench_fusion.sh (sourced, not run): the
# arguments, the prompt, interleaved repetitions of `loom run` per variant and
# the medians of its reported rates. The caller defines run_variant NAME, which
# runs `$LOOM run ... "${RUN_ARGS[@]}"` for that variant (stderr carries the rates).
#   script [LOOM] [MODEL] [TOKENIZER] [THREADS] [REPS]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOOM="${1:-$here/build/loom}"
MODEL="${2:-$here/../shared/models/stories260K/stories260K.bin}"
TOK="${3:-$here/../shared/models/stories260K/tok512.bin}"
THREADS="${4:-1}"
REPS="${5:-7}"
PROMPT="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree and wanted to"
RUN_ARGS=(-m "$MODEL" -z "$TOK" -p "$PROMPT" -n 200 --temp 0 -t "$THREADS")
run_tmp=$(mktemp -d); trap 'rm -rf "$run_tmp"' EXIT

# run_all VARIANT...: REPS rounds, each running every variant once (drift hits all alike)
run_all() {
    for r in $(seq 1 "$REPS"); do
        for v in "$@"; do run_variant "$v" 2>>"$run_tmp/$v" >/dev/null; done
    done
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# prompt tokens, median prompt tok/s, median generation tok/s of a variant
prompt_tokens() { sed -n 's/^prompt: \([0-9]*\) tokens.*/\1/p' "$run_tmp/$1" | head -1; }
prompt_rate() { sed -n 's/^prompt: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$run_tmp/$1" | median; }
gen_rate() { sed -n 's/.*generation: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$run_tmp/$1" | median; }
