#!/usr/bin/env bash
# loom run's llama.cpp-style options: -f FILE / -f - (prompt from a file or
# stdin), --stop (never printed, matched across token boundaries), --min-p,
# --repeat-penalty / --repeat-last-n, and errors of --rules / --fusion-preset
# labelled as theirs.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
run() { "$LOOM" run -m "$M" -z "$Z" "$@"; }

# ---- -f FILE and -f - : the prompt -p would give (one final newline dropped, as llama.cpp)
P="Once upon a time, a fox"
ref=$(run -p "$P" --temp 0 -n 24 2>/dev/null)
printf '%s\n' "$P" >"$TMP/prompt.txt"
a=$(run -f "$TMP/prompt.txt" --temp 0 -n 24 2>/dev/null)
b=$(printf '%s' "$P" | run -f - --temp 0 -n 24 2>/dev/null)
c=$(run --file="$TMP/prompt.txt" --temp 0 -n 24 2>/dev/null)
[ -n "$ref" ] && [ "$a" = "$ref" ] && [ "$b" = "$ref" ] && [ "$c" = "$ref" ] && pass "run -f FILE / -f - = -p" \
    || fail "run -f: '$a' / '$b' vs '$ref'"
printf 'line one\nline two\n\n' >"$TMP/two.txt"
a=$(run -f "$TMP/two.txt" --temp 0 -n 1 2>/dev/null)
[[ "$a" == $'line one\nline two\n'* ]] && pass "run -f keeps inner newlines" || fail "run -f two lines: '$a'"
expect_error "-f missing file" "-f .*nope.txt: cannot open" run -f "$TMP/nope.txt"
expect_error "-f a directory" "-f .*: is a directory" run -f "$TMP"
printf 'abc\0def' >"$TMP/nul.txt"
expect_error "-f with a NUL byte" "-f .*nul.txt: a NUL byte at offset 3" run -f "$TMP/nul.txt"
expect_error "-p and -f" "-p and -f both give the prompt" run -p hi -f "$TMP/prompt.txt"

# ---- --stop: the text before the first stop string, which is never printed
full=$(run -p "Once upon a time" --temp 0 -n 80 2>/dev/null)
gen=${full#Once upon a time}
checked=0
for off in 3 11 17 26 40 55; do
    for len in 1 3 6; do
        s=${gen:$off:$len}
        [ ${#s} -eq "$len" ] || continue
        case "$s" in *$'\n'*|' '*|*' ') continue ;; esac  # the shell trims; keep it simple
        before=${gen%%"$s"*}
        out=$(run -p "Once upon a time" --temp 0 -n 80 --stop "$s" 2>/dev/null)
        checked=$((checked + 1))
        if [ "$out" != "Once upon a time$before" ]; then
            fail "--stop '$s': got '$out', want 'Once upon a time$before'"
        fi
    done
done
[ $checked -ge 8 ] && pass "--stop: $checked stop strings cut the text before their first occurrence" \
    || fail "--stop: only $checked stop strings tried"
# repeatable: the earliest wins; a string that never comes changes nothing
w1=${gen:30:5}; w2=${gen:12:4}
out=$(run -p "Once upon a time" --temp 0 -n 80 --stop "$w1" --stop="$w2" --stop "zzzq" 2>/dev/null)
[ "$out" = "Once upon a time${gen%%"$w2"*}" ] && pass "--stop repeated: the first occurrence of any" \
    || fail "--stop x3: '$out'"
out=$(run -p "Once upon a time" --temp 0 -n 80 --stop "zzzq" 2>/dev/null)
[ "$out" = "$full" ] && pass "--stop that never occurs" || fail "--stop zzzq: '$out'"
# the stop string across a token boundary: the pieces of the generated text (BOS and the
# prompt's 4 tokens come first) from --pieces; the end of one and the start of the next
"$LOOM" tokenize -z "$Z" -p "$full" --pieces 2>"$TMP/pieces" >/dev/null
second=""; third=""
for k in $(seq 8 30); do
    second=$(sed -n "${k}p" "$TMP/pieces" | sed "s/^[0-9]*\t'\(.*\)'$/\1/")
    third=$(sed -n "$((k + 1))p" "$TMP/pieces" | sed "s/^[0-9]*\t'\(.*\)'$/\1/")
    [ ${#second} -ge 3 ] && [ ${#third} -ge 2 ] && [[ "$gen" == *"${second:1}${third:0:1}"* ]] && break
    second=""
done
if [ -n "$second" ]; then
    s="${second:1}${third:0:1}"  # the end of one piece and the start of the next
    out=$(run -p "Once upon a time" --temp 0 -n 80 --stop "$s" 2>/dev/null)
    [ "$out" = "Once upon a time${gen%%"$s"*}" ] && pass "--stop across pieces '$second'+'$third'" \
        || fail "--stop '$s' across pieces: '$out'"
else
    fail "--stop across pieces: no pieces from tokenize ('$second' '$third')"
fi
expect_error "--stop ''" "--stop: stop string 1 is empty" run -p x --stop ""
printf -- '--stop\nx\n%.0s' $(seq 1 17) | tr '\n' '\0' | xargs -0 "$LOOM" run -m "$M" -z "$Z" >/dev/null 2>"$TMP/err"
grep -q "'--stop' given more than 16 times" "$TMP/err" && pass "--stop at most 16 times" || fail "17 --stop: $(cat "$TMP/err")"

# ---- --min-p 1 keeps only the most likely token: greedy, at any temperature
a=$(run -p "Once upon a time" --temp 1.5 --min-p 1 -n 60 2>/dev/null)
b=$(run -p "Once upon a time" --temp 0 -n 60 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "--min-p 1 = greedy" || fail "--min-p 1: '$a' vs '$b'"
a=$(run -p "Once upon a time" --temp 1 --min-p 0.2 -n 60 --seed 5 2>/dev/null)
c=$(run -p "Once upon a time" --temp 1 -n 60 --seed 5 2>/dev/null)
[ -n "$a" ] && [ "$a" != "$c" ] && pass "--min-p 0.2 changes the draws" || fail "--min-p 0.2 had no effect"
expect_error "--min-p 1.5" "--min-p must be in \[0, 1\], got 1.5" run --min-p 1.5

# ---- --repeat-penalty: greedy text changes; --repeat-last-n 0 or penalty 1 is off
a=$(run -p "Once upon a time" --temp 0 -n 80 --repeat-penalty 1.5 2>/dev/null)
[ -n "$a" ] && [ "$a" != "$full" ] && pass "--repeat-penalty 1.5 changes greedy text" || fail "--repeat-penalty: '$a'"
b=$(run -p "Once upon a time" --temp 0 -n 80 --repeat-penalty 1.5 --repeat-last-n 0 2>/dev/null)
c=$(run -p "Once upon a time" --temp 0 -n 80 --repeat-penalty 1 --repeat-last-n 200 2>/dev/null)
[ "$b" = "$full" ] && [ "$c" = "$full" ] && pass "--repeat-last-n 0 / --repeat-penalty 1: off" \
    || fail "penalty off: '$b' / '$c'"
d=$(run -p "Once upon a time" --temp 0 -n 80 --repeat-penalty 1.5 --repeat-last-n -1 2>/dev/null)
[ -n "$d" ] && [ "$d" != "$full" ] && pass "--repeat-last-n -1 (the context)" || fail "--repeat-last-n -1: '$d'"
expect_error "--repeat-penalty 0" "--repeat-penalty must be > 0" run --repeat-penalty 0
expect_error "--repeat-penalty -1" "--repeat-penalty must be > 0" run --repeat-penalty -1
expect_error "--repeat-last-n -2" "--repeat-last-n must be >= -1" run --repeat-last-n -2

# ---- --rules / --fusion-preset errors are labelled as theirs (not --mode), with or without --mode
printf 'rules:\n  - name: a\n    fused_op: ffn\n    pattern:\n      - {name: gate, op: matmull, inputs: [$x, $w]}\n' >"$TMP/bad.yaml"
for m in "" "--mode fused" "--mode step_by_step"; do
    # shellcheck disable=SC2086
    expect_error "bad rules file ${m:-(no --mode)}" "^loom run: --rules: .*bad.yaml:5:[0-9]+: unknown op kind" \
        run -n 4 $m --rules "$TMP/bad.yaml"
done
expect_error "unknown preset label" "^loom run: --fusion-preset: unknown fusion preset 'huge'" run -n 4 --fusion-preset huge
finish
