#!/usr/bin/env bash
# loom bench rows name the model as llama-bench's do (type, size, parameters,
# backend), and a model that cannot be loaded gives its error, no table.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"

# parameters and bytes counted independently from the llama2.c header (f32, tied classifier)
read -r want_params <<<"$(python3 - "$M" <<'PY'
import struct, sys
dim, hidden, layers, heads, kv, vocab, seq = struct.unpack('<7i', open(sys.argv[1], 'rb').read(28))
kvdim = dim * kv // heads
print(abs(vocab) * dim + layers * (2 * dim + 2 * dim * dim + 2 * dim * kvdim + 3 * dim * hidden) + dim)
PY
)"
"$LOOM" bench -m "$M" -p 8 -n 2 -r 1 --json >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ] && python3 - "$TMP/out" "$want_params" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); p = int(sys.argv[2])
assert d['model_n_params'] == p, (d['model_n_params'], p)
assert d['model_size'] == 4 * p, d['model_size']
assert d['model_type'] == 'llama 260K f32', d['model_type']
assert d['backend'].startswith('CPU ('), d['backend']
assert len(d['results']) == 2
PY
then pass "bench --json: model type, size, params ($want_params), backend"
else fail "bench --json: $(cat "$TMP/out" "$TMP/err")"; fi

LOOM_ISA=generic "$LOOM" bench -m "$M" -p 8 -n 2 -r 1 -t 1,2 >"$TMP/out" 2>"$TMP/err"
rows=$(grep -c "^| llama 260K f32 | 0.99 MiB | 0.26 M | CPU (generic) | fused | f32 | [12] | \(pp8\|tg2\) |" "$TMP/out")
[ "$rows" -eq 4 ] && grep -q "^| model | size | params | backend | mode | kv | threads | test | t/s" "$TMP/out" \
    && pass "bench table: model, size, params and backend on every row" || fail "bench table: $(cat "$TMP/out" "$TMP/err")"

expect_error "bench -m /missing: the error, no table" "cannot load model: .*nope.bin" \
    "$LOOM" bench -m "$TMP/nope.bin" -p 4 -n 0 -r 1 -t 1,2 --mode step_by_step,fused
[ ! -s "$TMP/out" ] && pass "bench -m /missing: nothing on stdout" || fail "bench -m /missing printed: $(cat "$TMP/out")"
: >"$TMP/empty.bin"
expect_error "bench on an empty file" "empty" "$LOOM" bench -m "$TMP/empty.bin" -p 4 -n 0 -r 1 --json
[ ! -s "$TMP/out" ] && pass "bench on an empty file: no JSON" || fail "bench empty file printed: $(cat "$TMP/out")"
printf 'rules:\n  - name: a\n    fused_op: nope\n' >"$TMP/bad.yaml"
expect_error "bench --rules error labelled" "^loom bench: --rules: .*bad.yaml:3:[0-9]+: rule 'a': unknown fused op" \
    "$LOOM" bench -m "$M" -p 4 -n 0 -r 1 --mode fused --rules "$TMP/bad.yaml"
finish
