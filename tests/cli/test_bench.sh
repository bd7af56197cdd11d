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
rows = json.load(open(sys.argv[1])); p = int(sys.argv[2])
assert len(rows) == 2
for d in rows:
    assert d['model_n_params'] == p, (d['model_n_params'], p)
    assert d['model_size'] == 4 * p, d['model_size']
    assert d['model_type'] == 'llama 260K f32', d['model_type']
    assert d['backends'] == 'CPU' and d['isa'], d
PY
then pass "bench --json: model type, size, params ($want_params), backend"
else fail "bench --json: $(cat "$TMP/out" "$TMP/err")"; fi

LOOM_ISA=generic "$LOOM" bench -m "$M" -p 8 -n 2 -r 1 -t 1,2 >"$TMP/out" 2>"$TMP/err"
rows=$(grep -c "^| llama 260K f32 | 0.99 MiB | 0.26 M | CPU (generic) | fused | f32 | [12] | \(pp8\|tg2\) |" "$TMP/out")
[ "$rows" -eq 4 ] && grep -q "^| model | size | params | backend | mode | kv | threads | test | t/s" "$TMP/out" \
    && pass "bench table: model, size, params and backend on every row" || fail "bench table: $(cat "$TMP/out" "$TMP/err")"

# -np: tests through the batch engine, B sequences at once; every output format names the fields as
# llama-bench does (n_prompt, n_gen, n_depth, n_threads, avg_ts, stddev_ts) plus n_parallel
Z="$S260/tok512.bin"
"$LOOM" bench -m "$M" -z "$Z" -p 8 -n 4 -np 1,3 -d 0,20 -r 2 -t 1 -o jsonl >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ] && python3 - "$TMP/out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 8, len(rows)
assert sorted((r['n_parallel'], r['n_depth'], r['n_prompt'], r['n_gen']) for r in rows) == \
    sorted((b, d, p, g) for b in (1, 3) for d in (0, 20) for (p, g) in ((8, 0), (0, 4))), rows
for r in rows:
    for k in ('n_threads', 'avg_ts', 'stddev_ts', 'median_ts', 'model_type', 'type_k', 'test_time', 'n_batch'):
        assert k in r, k
    assert r['avg_ts'] > 0 and len(r['samples_ts']) == 2 and r['batch_invariant'] == 0
PY
then pass "bench -np 1,3 -d 0,20 -o jsonl"
else fail "bench -np jsonl: $(cat "$TMP/out" "$TMP/err")"; fi
"$LOOM" bench -m "$M" -z "$Z" -p 8 -n 0 -np 2 --batch-invariant 0,1 -r 1 -t 1 -o csv >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ] && python3 - "$TMP/out" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2 and sorted(r['batch_invariant'] for r in rows) == ['0', '1'], rows
assert all(r['n_parallel'] == '2' and r['n_prompt'] == '8' and float(r['avg_ts']) > 0 for r in rows), rows
PY
then pass "bench -o csv, --batch-invariant 0,1"
else fail "bench -o csv: $(cat "$TMP/out" "$TMP/err")"; fi
"$LOOM" bench -m "$M" -z "$Z" -p 8 -n 2 -np 2 -r 1 -t 1 >"$TMP/out" 2>"$TMP/err"
[ $? -eq 0 ] && grep -q "| threads | test | np | inv | t/s" "$TMP/out" && grep -qE "\| 1 \| tg2 \| 2 \| 0 \| [0-9.]+ \|" "$TMP/out" \
    && pass "bench -np: table columns" || fail "bench -np table: $(cat "$TMP/out" "$TMP/err")"
expect_error "bench -o xml" "-o expects md, json, jsonl or csv, got 'xml'" "$LOOM" bench -m "$M" -o xml
expect_error "bench --batch-invariant without -np" "give -np too" "$LOOM" bench -m "$M" --batch-invariant 1
expect_error "bench -np 0" "option '-np' expects a comma-separated list of integers >= 1" "$LOOM" bench -m "$M" -np 0
expect_error "bench -np on a model without a tokenizer" "give -z" "$LOOM" bench -m "$M" -p 4 -n 0 -np 2 -r 1

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
