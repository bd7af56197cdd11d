#!/usr/bin/env bash
# loom profile -f FILE / -f - reads its prompt as loom run does.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
prof() { "$LOOM" profile -m "$M" -z "$Z" -r 1 --mode fused "$@"; }
text="Once upon a time there was a cat who liked to sleep"
printf '%s\n' "$text" >"$TMP/prompt.txt"
want=$(prof -p "$text" 2>"$TMP/err" | grep '^prefill:')
[ -n "$want" ] || fail "profile -p: $(cat "$TMP/err")"
got=$(prof -f "$TMP/prompt.txt" 2>"$TMP/err" | grep '^prefill:')
[ -n "$want" ] && [ "$got" = "$want" ] && pass "profile -f FILE: the prompt of -p ($got)" \
    || fail "profile -f FILE: '$got', -p gave '$want': $(cat "$TMP/err")"
got=$(prof -f - <"$TMP/prompt.txt" 2>"$TMP/err" | grep '^prefill:')
[ -n "$want" ] && [ "$got" = "$want" ] && pass "profile -f - (stdin)" \
    || fail "profile -f -: '$got', -p gave '$want': $(cat "$TMP/err")"
expect_error "profile -p and -f" "-p and -f both give the prompt" prof -p "$text" -f "$TMP/prompt.txt"
expect_error "profile -f and --prompt-len" "give either -p, -f or a --prompt-len" \
    prof -f "$TMP/prompt.txt" --prompt-len 8
expect_error "profile -f missing" "-f $TMP/nope.txt: cannot open" prof -f "$TMP/nope.txt"
expect_error "profile -f a folder" "-f $TMP: is a directory" prof -f "$TMP"
finish
