#!/usr/bin/env bash
# loom chat's llama.cpp-style options on stories260K converted to GGUF (Llama 2
# template): -r / --reverse-prompt ends a reply without printing it, and the
# conversation goes on; --system-prompt-file; --min-p; --repeat-penalty.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
G="$TMP/s260.gguf"
"$LOOM" convert "$S260/stories260K.bin" "$G" -z "$S260/tok512.bin" >/dev/null 2>"$TMP/err" \
    || { fail "convert: $(cat "$TMP/err")"; finish; }
chat() { "$LOOM" chat -m "$G" --temp 0 -n 60 "$@"; }

full=$(echo "Once upon a time" | chat 2>/dev/null)
[ ${#full} -gt 40 ] || fail "chat reply too short to test: '$full'"
tried=0
for off in 5 14 23 31; do
    s=${full:$off:4}
    case "$s" in *$'\n'*) continue ;; esac
    tried=$((tried + 1))
    out=$(echo "Once upon a time" | chat -r "$s" 2>/dev/null)
    [ "$out" = "${full%%"$s"*}" ] || fail "-r '$s': '$out', want '${full%%"$s"*}'"
done
[ $tried -ge 3 ] && pass "-r: each reply ends before the reverse prompt ($tried tried)" || fail "-r: $tried tried"
s=${full:20:3}
printf 'Once upon a time\nTell me more\n' | chat -r "$s" --reverse-prompt="zzq" -v >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '^\[prompt' "$TMP/err")" -eq 2 ] && ! grep -qF -- "$s" "$TMP/out"; then
    pass "-r: the conversation goes on after a reverse prompt, which is never printed"
else
    fail "-r two turns: rc $rc $(cat "$TMP/out" "$TMP/err")"
fi
expect_error "-r ''" "-r: stop string 1 is empty" chat -r "" </dev/null

# --system-prompt-file: the -s text from a file
printf 'You tell stories.\n' >"$TMP/sys.txt"
a=$(echo "Hi" | chat -s "You tell stories." 2>/dev/null)
b=$(echo "Hi" | chat --system-prompt-file "$TMP/sys.txt" 2>/dev/null)
c=$(echo "Hi" | chat -sysf "$TMP/sys.txt" 2>/dev/null)
d=$(echo "Hi" | chat 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && [ "$a" != "$d" ] && pass "--system-prompt-file = -s" \
    || fail "--system-prompt-file: '$b' vs '$a' (none: '$d')"
expect_error "-s and -sysf" "-s and --system-prompt-file both" chat -s x -sysf "$TMP/sys.txt" </dev/null
expect_error "-sysf -" "--system-prompt-file -: stdin holds the conversation" chat -sysf - </dev/null
expect_error "-sysf missing" "--system-prompt-file .*nope: cannot open" chat -sysf "$TMP/nope" </dev/null

# sampling options
a=$(echo "Once upon a time" | "$LOOM" chat -m "$G" --temp 1.5 --min-p 1 -n 40 2>/dev/null)
b=$(echo "Once upon a time" | chat -n 40 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "chat --min-p 1 = greedy" || fail "chat --min-p 1: '$a' vs '$b'"
a=$(echo "Once upon a time" | chat --repeat-penalty 1.5 2>/dev/null)
[ -n "$a" ] && [ "$a" != "$full" ] && pass "chat --repeat-penalty changes the reply" || fail "chat --repeat-penalty: '$a'"
b=$(echo "Once upon a time" | chat --repeat-penalty 1.5 --repeat-last-n 0 2>/dev/null)
[ "$b" = "$full" ] && pass "chat --repeat-last-n 0: off" || fail "chat --repeat-last-n 0: '$b'"
expect_error "chat --min-p -1" "--min-p must be in \[0, 1\]" chat --min-p -1 </dev/null
expect_error "chat --repeat-penalty 0" "--repeat-penalty must be > 0" chat --repeat-penalty 0 </dev/null
finish
