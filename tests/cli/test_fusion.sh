#!/usr/bin/env bash
# Execution modes: the same greedy text as llama2.c in every mode,
# checkpoints, mode from flag / LOOM_MODE / rules file, rules-file errors.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
golden="$S260/golden_greedy_256.txt"
same() { diff <(sed -e 's/[[:space:]]*$//' "$1") <(sed -e 's/[[:space:]]*$//' "$2") >"$TMP/diff"; }
for mode in step_by_step fused fused_with_checkpoints; do
    for t in 1 2 3; do
        name="golden --mode $mode -t $t"
        if "$LOOM" run -m "$M" -z "$Z" --temp 0 -n 256 -t "$t" --mode "$mode" --checkpoint-action fail \
            >"$TMP/out" 2>"$TMP/err" && same "$golden" "$TMP/out"; then
            pass "$name"
        else
            fail "$name: $(tail -3 "$TMP/err")"; head -10 "$TMP/diff" >&2
        fi
    done
done
# checkpoints: one line per layer (its fused ops), none beyond tolerance, every fused op checked
grep -qE "^  L4 +256 .* 0$" "$TMP/err" && ! grep -q "not checked" "$TMP/err" \
    && pass "checkpoint report" || fail "checkpoint report: $(cat "$TMP/err")"
# f16 / bf16 / i8 KV caches: every fused op within the tolerance of the cache's dtype (the cache
# rows qkv_rope writes compared with kv_append's, dequantized, one rounding step of the dtype allowed)
for ct in f16 bf16 i8; do
    "$LOOM" run -m "$M" -z "$Z" --temp 0 -n 64 -t 2 --kv-dtype "$ct" --mode fused_with_checkpoints \
        --checkpoint-action fail >"$TMP/out" 2>"$TMP/err" && grep -qE "^  L4 +64 " "$TMP/err" \
        && pass "checkpoints, $ct cache" || fail "checkpoints, $ct cache: $(tail -5 "$TMP/err")"
done
# the ffn's one pass (preset one_pass_ffn: decode steps' ffn as one kernel, its partials summed
# by slice): checked against its decomposition at every layer, the same text on 1-3 threads
for t in 1 2 3; do
    "$LOOM" run -m "$M" -z "$Z" --temp 0 -n 64 -t "$t" --fusion-preset one_pass_ffn --mode fused_with_checkpoints \
        --checkpoint-action fail >"$TMP/op$t" 2>"$TMP/err" && grep -qE "^  L4 +64 .* 0$" "$TMP/err" \
        && pass "checkpoints, one-pass ffn, $t threads" || fail "checkpoints, one-pass ffn, $t threads: $(tail -5 "$TMP/err")"
done
cmp -s "$TMP/op1" "$TMP/op2" && cmp -s "$TMP/op1" "$TMP/op3" && pass "one-pass ffn: same text on 1-3 threads" \
    || fail "one-pass ffn: the text depends on the thread count"
# Decode attention split-KV in the graph: with chunks of 16 keys (block_kv) the
# four kv heads on three threads run split and merge; the text is one thread's.
sed -e 's/block_kv: auto/block_kv: 16/' "$(dirname "$0")/../../configs/fusion/default.yaml" >"$TMP/chunk16.yaml"
for t in 1 3; do
    "$LOOM" run -m "$M" -z "$Z" --temp 0 -n 96 -t "$t" --mode fused --rules "$TMP/chunk16.yaml" \
        >"$TMP/chunk16_$t" 2>"$TMP/err" || fail "chunk16 -t $t: $(cat "$TMP/err")"
done
[ -s "$TMP/chunk16_1" ] && cmp -s "$TMP/chunk16_1" "$TMP/chunk16_3" && pass "split-KV decode: 3 threads = 1" \
    || fail "split-KV decode text differs: $(diff "$TMP/chunk16_1" "$TMP/chunk16_3" | head -3)"
here="$(dirname "$0")/../golden"
for f in "$here"/stories260K_prompt_*.txt; do
    [ -f "$f" ] || continue
    prompt=$(sed -n '1p' "$f"); n=$(sed -n '2p' "$f")
    tail -n +3 "$f" >"$TMP/expect"
    if "$LOOM" run -m "$M" -z "$Z" --temp 0 -n "$n" -p "$prompt" --mode fused >"$TMP/out" 2>"$TMP/err" \
        && same "$TMP/expect" "$TMP/out"; then pass "fused prompt '$prompt'"
    else fail "fused prompt '$prompt': $(cat "$TMP/err")"; fi
done
# mode from the environment and from a rules file; --mode wins
LOOM_MODE=fused "$LOOM" run -m "$M" -z "$Z" --temp 0 -n 8 >/dev/null 2>"$TMP/err" \
    && grep -q "mode fused," "$TMP/err" && pass "LOOM_MODE=fused" || fail "LOOM_MODE: $(cat "$TMP/err")"
printf 'mode: fused_with_checkpoints\nrules: []\n' >"$TMP/r.yaml"
"$LOOM" run -m "$M" -z "$Z" --temp 0 -n 8 --rules "$TMP/r.yaml" >/dev/null 2>"$TMP/err" \
    && grep -q "mode fused_with_checkpoints," "$TMP/err" && pass "mode from rules file" \
    || fail "rules mode: $(cat "$TMP/err")"
LOOM_MODE=fused "$LOOM" run -m "$M" -z "$Z" --temp 0 -n 8 --mode step_by_step >/dev/null 2>"$TMP/err" \
    && grep -q "mode step_by_step," "$TMP/err" && pass "--mode beats LOOM_MODE" || fail "precedence: $(cat "$TMP/err")"
# an empty rule set runs the primitive graph: same text
"$LOOM" run -m "$M" -z "$Z" --temp 0 -n 64 --mode fused --rules "$TMP/r.yaml" >"$TMP/out" 2>"$TMP/err" \
    && "$LOOM" run -m "$M" -z "$Z" --temp 0 -n 64 >"$TMP/ref" 2>/dev/null && same "$TMP/ref" "$TMP/out" \
    && pass "fused with no rules" || fail "no rules: $(cat "$TMP/err")"
# rules-file errors name file:line:column
printf 'rules:\n  - name: a\n    fused_op: ffn\n    pattern:\n      - {name: gate, op: matmull, inputs: [$x, $w]}\n' >"$TMP/bad.yaml"
expect_error "unknown op in rules" "bad.yaml:5:.*unknown op kind 'matmull'" \
    "$LOOM" run -m "$M" -z "$Z" -n 4 --mode fused --rules "$TMP/bad.yaml"
printf 'rules:\n  - name: a\n   fused_op: [\n' >"$TMP/syntax.yaml"
expect_error "YAML syntax error" "syntax.yaml:[0-9]+:[0-9]+: YAML syntax error" \
    "$LOOM" run -m "$M" -z "$Z" -n 4 --mode fused --rules "$TMP/syntax.yaml"
expect_error "missing rules file" "nope.yaml: cannot open" \
    "$LOOM" run -m "$M" -z "$Z" -n 4 --mode fused --rules "$TMP/nope.yaml"
expect_error "unknown preset" "unknown fusion preset 'huge'" \
    "$LOOM" run -m "$M" -z "$Z" -n 4 --mode fused --fusion-preset huge
expect_error "bad LOOM_MODE" "LOOM_MODE: unknown mode 'fast'" env LOOM_MODE=fast "$LOOM" run -m "$M" -z "$Z" -n 4
finish
