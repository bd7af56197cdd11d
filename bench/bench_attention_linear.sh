#!/usr/bin/env bash
# Fused mode with attention_linear (the prefill attention and its output
# projection + residual add as one kernel, rule attention_linear_residual)
# against fused mode without it (the same rules with that rule disabled:
# flash_attention_score, then linear), by bench/bench_rules_ab.sh; ratio new / old.
#   bench/bench_attention_linear.sh LOOM MODEL THREADS PROMPTS GEN ROUNDS REPS
# e.g. bench/bench_attention_linear.sh build/loom ~/.cache/loom/models/SmolLM2-135M-Instruct.Q4_1.gguf 1,2 512,2048 0 4 3
# The rule is taken only where the o-proj fits in half the L2; to measure a larger one (a
# Llama-3.2-1B-shaped model of 4 layers, o-proj 8 MB in f16), force it with NEW_L2=bytes
# (the rules' hardware l2 on the new side):
#   python3 bench/make_llama_shaped.py OUT --shape llama3.2-1b --layers 4 --vocab 32000
#   NEW_L2=67108864 bench/bench_attention_linear.sh build/loom OUT 1,2 512,2048 0 3 2
set -euo pipefail
LOOM=${1:?loom binary} MODEL=${2:?model} THREADS=${3:-2} PROMPTS=${4:-512} GEN=${5:-0} ROUNDS=${6:-4} REPS=${7:-3}
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=bench/rules_lib.sh
. "$here/rules_lib.sh"
rules_without "$tmp/old.yaml" attention_linear_residual
new="$here/../configs/fusion/default.yaml"
if [ -n "${NEW_L2:-}" ]; then
    sed "s/^  l2: auto/  l2: $NEW_L2/" "$new" >"$tmp/new.yaml"
    grep -q "^  l2: $NEW_L2" "$tmp/new.yaml" || { echo "bench_attention_linear: could not set l2" >&2; exit 1; }
    new="$tmp/new.yaml"
fi
"$here/bench_rules_ab.sh" "$LOOM" "$MODEL" "$tmp/old.yaml" "$new" "$THREADS" \
    "$PROMPTS" "$GEN" "$ROUNDS" "$REPS"
