#!/usr/bin/env bash
# loom tokenize -f FILE / -f - (the text of a file or stdin, as -p gives it),
# and a 1 MiB text without digits through SmolLM2's pre-tokenizer in linear
# time (it rescanned to the next digit for every pre-token: 17 s for 480 kB).
source "$(dirname "$0")/lib.sh" "$@"
require_shared
Z="$S260/tok512.bin"
printf 'Once upon a time\n' >"$TMP/p.txt"
a=$("$LOOM" tokenize -z "$Z" -p "Once upon a time")
b=$("$LOOM" tokenize -z "$Z" -f "$TMP/p.txt")
c=$(printf 'Once upon a time' | "$LOOM" tokenize -z "$Z" -f -)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && pass "tokenize -f FILE / -f - = -p" || fail "tokenize -f: '$b' '$c' vs '$a'"
expect_error "tokenize -p and -f" "-p and -f both give the text" "$LOOM" tokenize -z "$Z" -p x -f "$TMP/p.txt"
expect_error "tokenize without text" "no text given \(-p TEXT or -f FILE\)" "$LOOM" tokenize -z "$Z"

MDIR="${LOOM_MODELS_DIR:-$HOME/.cache/loom/models}"
M="$MDIR/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$M" ]; then
    python3 - "$TMP/big.txt" <<'PY'
import random, sys
r = random.Random(1)
words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "\u00e9t\u00e9", "\u65e5\u672c", "!", "?", "'s", "\n", "  "]
out, n = [], 0
while n < 1 << 20:
    w = r.choice(words) + " "
    out.append(w)
    n += len(w.encode())
open(sys.argv[1], "w").write("".join(out))
PY
    start=$(date +%s%N)
    "$LOOM" tokenize -z "$M" -f "$TMP/big.txt" >"$TMP/ids" 2>"$TMP/err"; rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    n=$(wc -w <"$TMP/ids")
    # linear: ~0.2 s (a few seconds under the sanitizers); the quadratic search took minutes
    if [ $rc -eq 0 ] && [ "$n" -gt 200000 ] && [ "$ms" -lt 30000 ]; then
        pass "SmolLM2: 1 MiB without digits, $n tokens in $ms ms"
    else
        fail "SmolLM2 1 MiB: rc $rc, $n tokens, $ms ms $(cat "$TMP/err")"
    fi
elif [ -n "${CI:-}" ]; then
    fail "$M missing (CI runs scripts/fetch-models.sh)"
else
    echo "SKIP (part): $M missing"
fi
finish
