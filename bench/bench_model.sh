#!/usr/bin/env bash
# Prompt and generation tokens/s of `loom run` with the reference kernels
# (LOOM_ISA=ref) and with the optimised kernels of this machine, same process
# conditions, median of REPS runs each (interleaved so drift hits both).
#   bench/bench_model.sh [LOOM] [MODEL] [TOKENIZER] [THREADS] [REPS]
# shellcheck source=bench/run_lib.sh
source "$(dirname "$0")/run_lib.sh" || exit 1
run_variant() {
    if [ "$1" = ref ]; then env LOOM_ISA=ref "$LOOM" run "${RUN_ARGS[@]}"
    else env -u LOOM_ISA "$LOOM" run "${RUN_ARGS[@]}"; fi
}
run_all ref default
echo "| kernels | threads | prompt tokens | prompt tok/s (median) | generation tok/s (median) |"
echo "|---|---|---|---|---|"
for isa in ref default; do
    name=$([ "$isa" = ref ] && echo "reference (LOOM_ISA=ref)" || echo "optimised (default level)")
    echo "| $name | $THREADS | $(prompt_tokens $isa) | $(prompt_rate $isa) | $(gen_rate $isa) |"
done
