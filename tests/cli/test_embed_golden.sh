#!/usr/bin/env bash
# loom embed on all-MiniLM-L6-v2 against sentence-transformers' embeddings
# (tests/golden/minilm_embeddings.tsv, written by tests/golden/make_minilm.py):
# cosine >= 0.999 for every sentence (TSV with 1 thread, JSON with 2), and the
# comparison must be able to fail
# (a sentence against another's golden vector is far below). Needs the model
# from scripts/fetch-models.sh: skipped visibly without it, a failure in CI.
source "$(dirname "$0")/lib.sh" "$@"
GOLD="$(cd "$(dirname "$0")/../golden" && pwd)"
MODEL="${LOOM_MODELS_DIR:-$HOME/.cache/loom/models}/all-MiniLM-L6-v2"
if [ ! -f "$MODEL/model.safetensors" ] || [ ! -f "$MODEL/tokenizer.json" ]; then
    if [ -n "${CI:-}" ]; then
        echo "FAIL: $MODEL missing (CI must run scripts/fetch-models.sh)" >&2
        exit 1
    fi
    echo "SKIP: $MODEL missing (run scripts/fetch-models.sh)" >&2
    exit 77
fi

# cosine FILE_A FILE_B SHIFT: per line i, cos(a_i, b_{(i+SHIFT) mod n}); prints one value per line.
cosine() {
    awk -F'\t' -v shift="$3" 'NR == FNR { for (j = 1; j <= NF; j++) a[FNR, j] = $j; na = FNR; nf = NF; next }
        { for (j = 1; j <= NF; j++) b[FNR, j] = $j; nb = FNR }
        END { if (na != nb) { print "count " na " vs " nb; exit 1 }
              for (i = 1; i <= na; i++) { k = (i - 1 + shift) % na + 1; d = 0; x = 0; y = 0
                  for (j = 1; j <= nf; j++) { d += a[i, j] * b[k, j]; x += a[i, j] ^ 2; y += b[k, j] ^ 2 }
                  printf "%.6f\n", d / sqrt(x * y) } }' "$1" "$2"
}

# -t 1 as TSV, -t 2 as JSON (converted to TSV): both formats and thread counts in two runs
"$LOOM" embed -m "$MODEL" -f "$GOLD/minilm_sentences.txt" --format tsv -t 1 >"$TMP/emb.tsv" 2>"$TMP/err" ||
    fail "embed -t 1 failed: $(head -c 300 "$TMP/err")"
"$LOOM" embed -m "$MODEL" -f "$GOLD/minilm_sentences.txt" -t 2 >"$TMP/emb.json" 2>"$TMP/err" ||
    fail "embed -t 2 failed: $(head -c 300 "$TMP/err")"
if python3 -c 'import json,sys
v=json.load(open(sys.argv[1])); assert len(v)==8 and all(len(x)==384 for x in v)
print("\n".join("\t".join(repr(f) for f in x) for x in v))' "$TMP/emb.json" >"$TMP/emb2.tsv"; then
    pass "embed --format json: 8 vectors of 384"
else
    fail "embed json output: $(head -c 200 "$TMP/emb.json")"
fi
for run in emb emb2; do
    cosine "$TMP/$run.tsv" "$GOLD/minilm_embeddings.tsv" 0 >"$TMP/cos"
    if [ "$(wc -l <"$TMP/cos")" -eq 8 ] && awk '$1 < 0.999 { bad = 1 } END { exit bad }' "$TMP/cos"; then
        pass "$run: cosine >= 0.999 on all 8 sentences (min $(sort -n "$TMP/cos" | head -1))"
    else
        fail "$run: cosines $(tr '\n' ' ' <"$TMP/cos")"
    fi
done
cosine "$TMP/emb.tsv" "$GOLD/minilm_embeddings.tsv" 1 >"$TMP/cos_shift"
if awk '$1 >= 0.999 { bad = 1 } END { exit bad }' "$TMP/cos_shift"; then
    pass "mismatched sentences are told apart (max $(sort -n "$TMP/cos_shift" | tail -1))"
else
    fail "the cosine check cannot fail: $(tr '\n' ' ' <"$TMP/cos_shift")"
fi
# (a sentence alone vs inside a padded batch: tests/unit/test_bert.c, bit for bit)
# bad input: clear errors, no crash
expect_error "missing model folder" "not a model folder" "$LOOM" embed -m "$TMP/nope" -p hi
mkdir -p "$TMP/llama"
printf '{"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4}' >"$TMP/llama/config.json"
ln -s "$MODEL/model.safetensors" "$TMP/llama/model.safetensors"
expect_error "not a BERT config" "not a BERT encoder" "$LOOM" embed -m "$TMP/llama" -p hi
mkdir -p "$TMP/wrong"
sed 's/"hidden_size": 384/"hidden_size": 768/' "$MODEL/config.json" >"$TMP/wrong/config.json"
ln -s "$MODEL/model.safetensors" "$TMP/wrong/model.safetensors"
expect_error "wrong shapes for the config" "expected \[30522, 768\]" "$LOOM" embed -m "$TMP/wrong" -p hi
mkdir -p "$TMP/trunc"
cp "$MODEL/config.json" "$MODEL/tokenizer.json" "$TMP/trunc/"
head -c 100000 "$MODEL/model.safetensors" >"$TMP/trunc/model.safetensors"
expect_error "truncated safetensors" "outside the data section|truncated" "$LOOM" embed -m "$TMP/trunc" -p hi
printf 'fine\n\xff\xfe bad\n' >"$TMP/bad_utf8.txt"
expect_error "invalid UTF-8 names the input line" "input 2: .*UTF-8" "$LOOM" embed -m "$MODEL" -f "$TMP/bad_utf8.txt"
"$LOOM" embed -m "$MODEL" -p hi --format xml >/dev/null 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q "json or tsv" "$TMP/err"; then pass "unknown output format: usage error"
else fail "unknown output format: rc $rc, $(head -c 200 "$TMP/err")"; fi
echo "$PASSES passed, $FAILS failed"
[ "$FAILS" -eq 0 ]
