#!/usr/bin/env bash
# loom convert on the CLI: llama2.c -> GGUF (q8_0), the result generates the
# same greedy text as the source for the f32 conversion, requantization works
# on it, and bad invocations fail with one clear line.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
if "$LOOM" convert "$M" "$TMP/s.gguf" -z "$Z" 2>"$TMP/err"; then pass "convert llama2.c -> gguf"
else fail "convert: $(cat "$TMP/err")"; fi
"$LOOM" run -m "$M" -z "$Z" -p "Once upon a time" -n 40 --temp 0 >"$TMP/a" 2>/dev/null
"$LOOM" run -m "$TMP/s.gguf" -p "Once upon a time" -n 40 --temp 0 >"$TMP/b" 2>/dev/null
if [ -s "$TMP/a" ] && cmp -s "$TMP/a" "$TMP/b"; then pass "converted f32 GGUF (own vocabulary) generates the same text"
else fail "text differs: '$(head -c 120 "$TMP/a")' vs '$(head -c 120 "$TMP/b")'"; fi
if "$LOOM" convert "$TMP/s.gguf" "$TMP/q.gguf" --type q4_1 2>"$TMP/err" &&
        "$LOOM" run -m "$TMP/q.gguf" -p "Once upon a time" -n 10 --temp 0 >/dev/null 2>&1; then
    pass "requantize gguf -> q4_1 and run it"
else fail "requantize: $(cat "$TMP/err")"; fi
expect_error "llama2.c without tokenizer" "tokenizer" "$LOOM" convert "$M" "$TMP/x.gguf"
expect_error "unknown type" "q5_k" "$LOOM" convert "$TMP/s.gguf" "$TMP/x.gguf" --type q5_k
expect_error "missing input" "cannot open" "$LOOM" convert "$TMP/none.bin" "$TMP/x.gguf"
head -c 5000 "$TMP/s.gguf" >"$TMP/cut.gguf"
expect_error "truncated gguf" "cut.gguf" "$LOOM" convert "$TMP/cut.gguf" "$TMP/x.gguf" --type q8_0
[ ! -e "$TMP/x.gguf" ] && pass "no output left after failures" || fail "x.gguf written despite errors"
finish
