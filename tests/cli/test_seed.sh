#!/usr/bin/env bash
# Seeds: every explicit seed is honoured (18446744073709551615 included, once
# the "no seed" marker), and clock seeds have nanosecond resolution (two runs
# in one second differ).
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
seed_of() { sed -n 's/.*seed \([0-9]*\)$/\1/p' "$1"; }

"$LOOM" run -m "$M" -z "$Z" -n 1 >/dev/null 2>"$TMP/e1"
"$LOOM" run -m "$M" -z "$Z" -n 1 >/dev/null 2>"$TMP/e2"
s1=$(seed_of "$TMP/e1"); s2=$(seed_of "$TMP/e2")
[ -n "$s1" ] && [ -n "$s2" ] && [ "$s1" != "$s2" ] && pass "run: clock seeds of two quick runs differ ($s1, $s2)" \
    || fail "run: clock seeds '$s1' '$s2': $(cat "$TMP/e1")"

MAX=18446744073709551615
for seed in 0 $MAX; do
    a=$("$LOOM" run -m "$M" -z "$Z" -n 40 --temp 1 --top-p 1 --seed $seed 2>"$TMP/e1")
    sleep 1.1  # a clock seed would change now
    b=$("$LOOM" run -m "$M" -z "$Z" -n 40 --temp 1 --top-p 1 --seed=$seed 2>"$TMP/e2")
    if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(seed_of "$TMP/e1")" = $seed ] && [ "$(seed_of "$TMP/e2")" = $seed ]; then
        pass "run: --seed $seed honoured"
    else
        fail "run: --seed $seed: '$a' vs '$b'; $(cat "$TMP/e1" "$TMP/e2")"
    fi
done
c=$("$LOOM" run -m "$M" -z "$Z" -n 40 --temp 1 --top-p 1 --seed $((0x7fffffff)) 2>/dev/null)
[ "$c" != "$a" ] && pass "run: another seed, another text" || fail "run: seeds $MAX and 2^31-1 give the same text"
"$LOOM" run -m "$M" -z "$Z" --seed 18446744073709551616 >/dev/null 2>"$TMP/err"; rc=$?
[ $rc -eq 2 ] && grep -q "'--seed' expects a non-negative integer" "$TMP/err" && pass "run: seed beyond 2^64-1 refused" \
    || fail "run: --seed 2^64: rc $rc $(cat "$TMP/err")"

# chat: the same seed, the same reply; the seed is reported with -v
G="$TMP/s260.gguf"
"$LOOM" convert "$M" "$G" -z "$Z" >/dev/null 2>&1 || fail "convert for chat"
for i in 1 2; do
    echo "Once upon a time" | "$LOOM" chat -m "$G" --temp 1 --top-k 0 --top-p 1 -n 24 --seed $MAX -v \
        >"$TMP/chat$i" 2>"$TMP/cerr$i"
    sleep 1.1
done
if [ -s "$TMP/chat1" ] && cmp -s "$TMP/chat1" "$TMP/chat2" && grep -q "seed $MAX" "$TMP/cerr1"; then
    pass "chat: --seed $MAX honoured"
else
    fail "chat: --seed $MAX: $(cat "$TMP/chat1" "$TMP/chat2" "$TMP/cerr1")"
fi
echo "Once upon a time" | "$LOOM" chat -m "$G" -n 2 -v >/dev/null 2>"$TMP/c1"
echo "Once upon a time" | "$LOOM" chat -m "$G" -n 2 -v >/dev/null 2>"$TMP/c2"
s1=$(sed -n 's/^loom chat: seed //p' "$TMP/c1"); s2=$(sed -n 's/^loom chat: seed //p' "$TMP/c2")
[ -n "$s1" ] && [ "$s1" != "$s2" ] && pass "chat: clock seeds differ" || fail "chat: clock seeds '$s1' '$s2'"
finish
