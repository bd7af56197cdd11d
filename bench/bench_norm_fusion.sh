#!/usr/bin/env bash
# Fused mode with the norms inside the next GEMMs and the residual adds in the
# previous GEMMs' epilogues (the default rules) against fused mode without
# them (the same rules with norm_qkv_rope_*, norm_ffn_residual,
# linear_residual and norm_linear disabled: add_rms_norm and separate norms,
# the fusion of before; attention_linear_residual, which takes the output
# projection's residual add too, is disabled on both sides), by bench/bench_rules_ab.sh; ratio new / old.
#   bench/bench_norm_fusion.sh LOOM MODEL THREADS PROMPTS GEN ROUNDS REPS
# e.g. bench/bench_norm_fusion.sh build/loom ~/.cache/loom/models/SmolLM2-135M-Instruct.Q4_1.gguf 1,2 512,2048 64 3 3
# A Llama2-7B-shaped model of 2 layers: bench/make_llama_shaped.py OUT --layers 2.
set -euo pipefail
LOOM=${1:?loom binary} MODEL=${2:?model} THREADS=${3:-2} PROMPTS=${4:-512} GEN=${5:-64} ROUNDS=${6:-3} REPS=${7:-3}
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# the rules of before: the new rules disabled
# shellcheck source=bench/rules_lib.sh
. "$here/rules_lib.sh"
rules_without "$tmp/old.yaml" norm_qkv_rope_cache norm_qkv_rope_cache_i8 norm_qkv_rope_paged norm_qkv_rope_paged_i8 \
    norm_ffn_residual linear_residual norm_linear attention_linear_residual
# the rules of now from the same file (not the binary's built-in copy, which may be older),
# attention_linear_residual disabled as on the old side
rules_without "$tmp/new.yaml" attention_linear_residual
"$here/bench_rules_ab.sh" "$LOOM" "$MODEL" "$tmp/old.yaml" "$tmp/new.yaml" "$THREADS" \
    "$PROMPTS" "$GEN" "$ROUNDS" "$REPS"
