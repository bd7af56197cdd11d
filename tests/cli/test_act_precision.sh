#!/usr/bin/env bash
# --act-precision q8|full and the rules file's act_precision: key, on a q4_1
# conversion of stories260K: full gives the same greedy text step_by_step and
# fused, on 1 and 2 threads; the flag beats the rules file; loom run names the
# precision it used; bench and profile take the option; bad values fail with
# one line naming them.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
"$LOOM" convert "$M" "$TMP/q.gguf" -z "$Z" --type q4_1 2>"$TMP/err" && pass "convert to q4_1" \
    || fail "convert: $(cat "$TMP/err")"
gen() { "$LOOM" run -m "$TMP/q.gguf" -p "Once upon a time" -n 48 --temp 0 "$@"; }
gen --act-precision full --mode step_by_step >"$TMP/a" 2>"$TMP/err"
grep -q "activations full," "$TMP/err" && pass "run names full" || fail "run: $(cat "$TMP/err")"
gen --act-precision full --mode fused >"$TMP/b" 2>/dev/null
gen --act-precision full --mode fused -t 2 >"$TMP/c" 2>/dev/null
if [ -s "$TMP/a" ] && cmp -s "$TMP/a" "$TMP/b" && cmp -s "$TMP/a" "$TMP/c"; then
    pass "full: step_by_step = fused = fused -t 2"
else fail "full texts differ: '$(head -c 100 "$TMP/a")' / '$(head -c 100 "$TMP/b")' / '$(head -c 100 "$TMP/c")'"; fi
gen --act-precision q8 --mode fused >/dev/null 2>"$TMP/err"
grep -q "activations q8," "$TMP/err" && pass "run names q8" || fail "q8: $(cat "$TMP/err")"
gen >/dev/null 2>"$TMP/err"
grep -qE "activations (q8|full)," "$TMP/err" && pass "default resolved to q8 or full" || fail "default: $(cat "$TMP/err")"
# the rules file chooses when the flag does not; the flag wins
printf 'act_precision: full\nrules: []\n' >"$TMP/full.yaml"
gen --rules "$TMP/full.yaml" >/dev/null 2>"$TMP/err"
grep -q "activations full," "$TMP/err" && pass "rules act_precision: full" || fail "rules: $(cat "$TMP/err")"
gen --rules "$TMP/full.yaml" --act-precision q8 >/dev/null 2>"$TMP/err"
grep -q "activations q8," "$TMP/err" && pass "--act-precision beats the rules" || fail "flag: $(cat "$TMP/err")"
# bench runs both in one table; profile takes the option
if "$LOOM" bench -m "$TMP/q.gguf" -p 8 -n 2 -r 1 -t 1 --act-precision q8,full >"$TMP/out" 2>"$TMP/err" &&
        grep -qE "\| 1 \| pp8 \| .* \| q8 \|$" "$TMP/out" && grep -qE "\| 1 \| tg2 \| .* \| full \|$" "$TMP/out"; then
    pass "bench --act-precision q8,full"
else fail "bench: $(cat "$TMP/err") $(cat "$TMP/out")"; fi
"$LOOM" profile -m "$TMP/q.gguf" --prompt-len 8 --act-precision full --mode fused >/dev/null 2>"$TMP/err" \
    && pass "profile --act-precision full" || fail "profile: $(cat "$TMP/err")"
for cmd in run chat bench profile; do
    "$LOOM" "$cmd" --help 2>&1 | grep -q -- "--act-precision" && pass "$cmd --help lists --act-precision" \
        || fail "$cmd --help: no --act-precision"
done
expect_error "bad --act-precision" "--act-precision expects q8 or full, got 'q4'" gen --act-precision q4
expect_error "bad bench --act-precision" "--act-precision expects q8 or full, got 'bf16'" \
    "$LOOM" bench -m "$TMP/q.gguf" -p 8 -n 0 -r 1 --act-precision q8,bf16
printf 'rules: []\nact_precision: f16\n' >"$TMP/bad.yaml"
expect_error "bad act_precision in rules" "bad.yaml:2:16: act_precision: expected q8 or full, found 'f16'" \
    gen --rules "$TMP/bad.yaml"
finish
