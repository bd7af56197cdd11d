#!/usr/bin/env bash
# loom perplexity: llama-perplexity's output lines (running estimates, the
# final line); the last running estimate is the final value; step_by_step and
# fused agree; thread counts give the same value; --chunks K scores the first K
# chunks; errors for a short text, no -f, bad -c, a missing file.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
TEXT="$(dirname "$0")/../../README.md"
ppl() { "$LOOM" perplexity -m "$M" -z "$Z" -f "$TEXT" -c 64 "$@" 2>"$TMP/err"; }
out=$(ppl --chunks 4 -t 2)
if [ $? -eq 0 ] && echo "$out" | head -1 | grep -Eq '^\[1\][0-9.]+,\[2\][0-9.]+,\[3\][0-9.]+,\[4\][0-9.]+,$' \
    && echo "$out" | grep -Eq '^Final estimate: PPL = [0-9]+\.[0-9]{4} \+/- [0-9]+\.[0-9]{5}$'; then
    pass "running estimates and the final line"
else
    fail "output: $out $(cat "$TMP/err")"
fi
final() { sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p'; }
v4=$(echo "$out" | final)
# the running estimate after chunk 4 is the final value
[ "$(echo "$out" | head -1 | sed 's/.*\[4\]\([0-9.]*\),$/\1/')" = "$v4" ] && pass "last running estimate = final" \
    || fail "running estimate vs final: $out"
v1=$(ppl --chunks 4 -t 1 | final)
[ "$v1" = "$v4" ] && pass "1 and 2 threads: same value" || fail "threads: $v1 vs $v4"
vs=$(ppl --chunks 4 -t 2 --mode step_by_step | final)
python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-3 * b)" "$vs" "$v4" \
    && pass "step_by_step = fused (1e-3)" || fail "step_by_step $vs vs fused $v4"
v2=$(ppl --chunks 2 -t 2 | final)
[ "$(echo "$out" | head -1 | sed 's/.*\[2\]\([0-9.]*\),\[3\].*/\1/')" = "$v2" ] && pass "--chunks 2 = the first two chunks" \
    || fail "--chunks 2 gives $v2; running: $out"
vall=$(ppl -t 2 | final)
[ -n "$vall" ] && python3 -c "import sys, math; v = float(sys.argv[1]); sys.exit(not (math.isfinite(v) and v > 1.0))" "$vall" \
    && pass "all chunks: a finite perplexity above 1 ($vall)" || fail "all chunks: '$vall'"
printf 'tiny text' >"$TMP/short.txt"
expect_error "perplexity: text shorter than a chunk" "fewer than one chunk" \
    "$LOOM" perplexity -m "$M" -z "$Z" -f "$TMP/short.txt" -c 64
"$LOOM" perplexity -m "$M" -z "$Z" >/dev/null 2>"$TMP/err"; [ $? -eq 2 ] && pass "no -f: usage error" || fail "no -f"
expect_error "perplexity: -c 2" "-c must be >= 4" "$LOOM" perplexity -m "$M" -z "$Z" -f "$TEXT" -c 2
expect_error "perplexity: missing file" "cannot (read|open)" "$LOOM" perplexity -m "$M" -z "$Z" -f "$TMP/none.txt"
finish
