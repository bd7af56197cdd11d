#!/usr/bin/env bash
# --dump writes every intermediate with its name, shape and dtype; loom tokenize prints ids.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
if "$LOOM" run -m "$M" -z "$Z" --temp 0 -n 2 -p "Hi" --dump "$TMP/dump" >/dev/null 2>"$TMP/err"; then
    pass "run --dump"
else
    fail "run --dump: $(cat "$TMP/err")"
fi
if python3 - "$TMP/dump" <<'PY'
import os, sys
d = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(d, "index.tsv"))]
seqs = sorted({int(r[0]) for r in rows})
assert seqs == [0, 1], seqs                      # prefill + one decode step
size = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4}
for seq, node, name, op, dtype, shape, fname in rows:
    n = 1
    for x in shape.split("x"): n *= int(x)
    got = os.path.getsize(os.path.join(d, fname))
    assert got == n * size[dtype], (fname, got, n)
names = [r[2] for r in rows if r[0] == "0"]
assert names[0] == "embd" and names[-1] == "logits", names[:3]
assert "L0.q_rope" in names and "L4.ffn_residual" in names
logits = [r for r in rows if r[2] == "logits"]
assert all(r[5] == "1x512" for r in logits)
PY
then pass "dump index and files consistent"; else fail "dump contents"; fi

out=$("$LOOM" tokenize -z "$Z" -p "Once upon a time")
set -- $out
[ "$1" = "1" ] && [ "$#" -ge 3 ] && pass "tokenize starts with BOS" || fail "tokenize output '$out'"
empty=$("$LOOM" tokenize -z "$Z" -p "")
[ "$empty" = "1" ] && pass "tokenize empty text = BOS" || fail "tokenize empty text gave '$empty'"
finish
