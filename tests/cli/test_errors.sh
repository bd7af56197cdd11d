#!/usr/bin/env bash
# Bad input gives a one-line error naming the problem and exit status 1, never a signal.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
run() { "$LOOM" run "$@"; }

expect_error "missing model" "cannot open.*nope.bin" run -m "$TMP/nope.bin" -z "$Z"
expect_error "missing tokenizer" "tokenizer.*nope.bin" run -m "$M" -z "$TMP/nope.bin"
: >"$TMP/empty.bin"
expect_error "empty model" "empty" run -m "$TMP/empty.bin" -z "$Z"
expect_error "empty tokenizer" "tokenizer.*empty" run -m "$M" -z "$TMP/empty.bin"
head -c 100000 "$M" >"$TMP/trunc.bin"
expect_error "truncated checkpoint" "truncated" run -m "$TMP/trunc.bin" -z "$Z"
head -c 20 "$M" >"$TMP/short_header.bin"
expect_error "truncated header" "truncated header" run -m "$TMP/short_header.bin" -z "$Z"
head -c 200 "$S260/stories260K.v1.bin" >"$TMP/short_v1.bin"
expect_error "truncated v1 header" "truncated header" run -m "$TMP/short_v1.bin" -z "$Z"
# header with impossible sizes: dim = -64, then n_heads = 0
python3 - "$M" "$TMP" <<'PY'
import struct, sys
src, tmp = sys.argv[1], sys.argv[2]
data = bytearray(open(src, 'rb').read())
bad = bytearray(data); bad[0:4] = struct.pack('<i', -64); open(tmp + '/neg_dim.bin', 'wb').write(bad)
bad = bytearray(data); bad[12:16] = struct.pack('<i', 0); open(tmp + '/zero_heads.bin', 'wb').write(bad)
bad = bytearray(data); bad[0:4] = struct.pack('<i', 1 << 30); open(tmp + '/huge_dim.bin', 'wb').write(bad)
bad = bytearray(data); bad[12:16] = struct.pack('<i', 7); open(tmp + '/heads_7.bin', 'wb').write(bad)
bad = bytearray(data); bad[4:8] = struct.pack('<i', 173); open(tmp + '/size_mismatch.bin', 'wb').write(bad)
PY
expect_error "negative dim" "impossible dim" run -m "$TMP/neg_dim.bin" -z "$Z"
expect_error "zero heads" "impossible n_heads" run -m "$TMP/zero_heads.bin" -z "$Z"
expect_error "huge dim" "impossible dim" run -m "$TMP/huge_dim.bin" -z "$Z"
expect_error "dim not multiple of heads" "not a multiple of n_heads" run -m "$TMP/heads_7.bin" -z "$Z"
expect_error "header/file size mismatch" "truncated|size mismatch" run -m "$TMP/size_mismatch.bin" -z "$Z"
if [ -f "$MODELS/llama2-tokenizer/tokenizer.bin" ]; then
    expect_error "tokenizer/vocab mismatch" "tokenizer/vocab mismatch.*32000.*512" \
        run -m "$M" -z "$MODELS/llama2-tokenizer/tokenizer.bin"
fi
long=$(printf 'Once upon a time %.0s' $(seq 1 20))
expect_error "prompt longer than context" "prompt is [0-9]+ tokens, longer than the context of 16" \
    run -m "$M" -z "$Z" -c 16 -p "$long"
expect_error "-n beyond context" "beyond the context of 512" run -m "$M" -z "$Z" -n 600
expect_error "-c beyond model" "context 1000 exceeds" run -m "$M" -z "$Z" -c 1000
expect_error "threads 0" "-t must be >= 1" run -m "$M" -z "$Z" -t 0
expect_error "threads negative" "-t must be >= 1" run -m "$M" -z "$Z" -t -3
expect_error "negative -n" "-n must be >= 0" run -m "$M" -z "$Z" -n -1
expect_error "bad temperature" "--temp" run -m "$M" -z "$Z" --temp -1
expect_error "bad top-p" "--top-p" run -m "$M" -z "$Z" --top-p 1.5
expect_error "unknown mode" "unknown mode 'warp'" run -m "$M" -z "$Z" --mode warp
expect_error "bad cache type" "--kv-dtype expects f32, f16, bf16 or i8, got 'q8_0'" run -m "$M" -z "$Z" --kv-dtype q8_0
# without -m, loom takes the default model from $LOOM_MODELS_DIR: none there
expect_error "no model" "no model given" env LOOM_MODELS_DIR="$TMP/no-models" "$LOOM" run -z "$Z"
expect_error "no tokenizer" "no tokenizer given" run -m "$M"
expect_error "tokenize without text" "no text" "$LOOM" tokenize -z "$Z"

# usage errors: exit status 2, one line naming the option
for args in "--bogus" "-n" "-n abc" "--seed -5" "-t 1.5"; do
    # shellcheck disable=SC2086
    "$LOOM" run -m "$M" -z "$Z" $args >"$TMP/out" 2>"$TMP/err"; rc=$?
    opt=${args%% *}
    if [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q -- "'$opt'" "$TMP/err"; then
        pass "usage error '$args'"
    else
        fail "usage error '$args': rc=$rc $(cat "$TMP/err")"
    fi
done
"$LOOM" frobnicate >/dev/null 2>&1; [ $? -eq 2 ] && pass "unknown command" || fail "unknown command"
for cmd in run tokenize profile; do
    "$LOOM" "$cmd" --help >"$TMP/out" 2>&1 && grep -q "usage: loom $cmd" "$TMP/out" \
        && pass "$cmd --help" || fail "$cmd --help"
done
finish
