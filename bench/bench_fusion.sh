#!/usr/bin/env bash
# `loom run` tokens/s in the three execution modes (step_by_step, fused,
# fused_with_checkpoints), median of REPS runs each, interleaved so machine
# drift hits every mode alike; ratios against step_by_step.
#   bench/bench_fusion.sh [LOOM] [MODEL] [TOKENIZER] [THREADS] [REPS]
# shellcheck source=bench/run_lib.sh
source "$(dirname "$0")/run_lib.sh" || exit 1
modes="step_by_step fused fused_with_checkpoints"
run_variant() { "$LOOM" run "${RUN_ARGS[@]}" --mode "$1"; }
# shellcheck disable=SC2086
run_all $modes
echo "| mode | threads | prompt tok/s (median) | generation tok/s (median) | prompt x | generation x |"
echo "|---|---|---|---|---|---|"
for m in $modes; do
    pp=$(prompt_rate "$m") tg=$(gen_rate "$m")
    [ "$m" = step_by_step ] && { bp=$pp; bg=$tg; }
    echo "| $m | $THREADS | $pp | $tg | $(awk -v a="$pp" -v b="$bp" 'BEGIN{printf "%.2f", a/b}') | $(awk -v a="$tg" -v b="$bg" 'BEGIN{printf "%.2f", a/b}') |"
done
