#!/usr/bin/env bash
# loom embed on bad input: a NaN weight is an error naming the input (it
# printed NaN vectors with exit 0), -f DIR an error (it printed []), -p with
# -f an error (it ignored -f), a NUL byte an error naming the line (it cut
# the line short). A tiny random BERT is written here: no download needed.
source "$(dirname "$0")/lib.sh" "$@"
python3 - "$TMP" <<'PY'
import json, os, random, struct, sys
D, NH, FF, NL, V, P = 16, 2, 24, 2, 40, 32
rng = random.Random(3)
def tensors(nan):
    t = {}
    def mk(name, *shape, scale=0.5, off=0.0):
        n = 1
        for s in shape: n *= s
        t[name] = (list(shape), [off + scale * (rng.random() - 0.5) for _ in range(n)])
    mk("embeddings.word_embeddings.weight", V, D, scale=1)
    mk("embeddings.position_embeddings.weight", P, D)
    mk("embeddings.token_type_embeddings.weight", 2, D)
    mk("embeddings.LayerNorm.weight", D, scale=0.2, off=1); mk("embeddings.LayerNorm.bias", D, scale=0.2)
    for l in range(NL):
        p = f"encoder.layer.{l}."
        for s in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            mk(p + s + ".weight", D, D); mk(p + s + ".bias", D, scale=0.1)
        mk(p + "attention.output.LayerNorm.weight", D, scale=0.2, off=1); mk(p + "attention.output.LayerNorm.bias", D, scale=0.2)
        mk(p + "intermediate.dense.weight", FF, D); mk(p + "intermediate.dense.bias", FF, scale=0.1)
        mk(p + "output.dense.weight", D, FF); mk(p + "output.dense.bias", D, scale=0.1)
        mk(p + "output.LayerNorm.weight", D, scale=0.2, off=1); mk(p + "output.LayerNorm.bias", D, scale=0.2)
    if nan:
        t["encoder.layer.0.attention.self.value.weight"][1][5] = float("nan")
    return t
for name, nan in (("ok", False), ("nan", True)):
    d = os.path.join(sys.argv[1], name)
    os.makedirs(d)
    hdr, data = {}, b""
    for k, (shape, vals) in tensors(nan).items():
        b = struct.pack(f"<{len(vals)}f", *vals)
        hdr[k] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open(os.path.join(d, "model.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + data)
    json.dump({"architectures": ["BertModel"], "model_type": "bert", "hidden_size": D, "num_attention_heads": NH,
               "intermediate_size": FF, "num_hidden_layers": NL, "vocab_size": V, "max_position_embeddings": P,
               "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12},
              open(os.path.join(d, "config.json"), "w"))
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{f"w{i}": i for i in range(4, V)}}
    json.dump({"normalizer": {"type": "BertNormalizer", "lowercase": True},
               "pre_tokenizer": {"type": "BertPreTokenizer"}, "model": {"type": "WordPiece", "vocab": vocab}},
              open(os.path.join(d, "tokenizer.json"), "w"))
PY
OK="$TMP/ok"; BAD="$TMP/nan"
printf 'w5 w6\nw7\n' >"$TMP/in.txt"
"$LOOM" embed -m "$OK" -f "$TMP/in.txt" --format tsv >"$TMP/out" 2>"$TMP/err"
[ $? -eq 0 ] && [ "$(wc -l <"$TMP/out")" -eq 2 ] && ! grep -qi nan "$TMP/out" && pass "tiny model embeds two lines" \
    || fail "tiny model: $(cat "$TMP/out" "$TMP/err")"
expect_error "NaN weight: an error, not NaN vectors" "cannot embed the input: .*embedding of input 1 is NaN" \
    "$LOOM" embed -m "$BAD" -f "$TMP/in.txt"
grep -qi nan "$TMP/out" && fail "NaN printed on stdout: $(head -c 200 "$TMP/out")" || pass "no NaN on stdout"
expect_error "-f a directory" "-f .*: is a directory" "$LOOM" embed -m "$OK" -f "$TMP"
[ ! -s "$TMP/out" ] && pass "-f DIR prints nothing (was [])" || fail "-f DIR printed: $(cat "$TMP/out")"
expect_error "-f missing" "-f .*nope.txt: cannot open: No such file" "$LOOM" embed -m "$OK" -f "$TMP/nope.txt"
expect_error "-p with -f" "-p and -f both give the input" "$LOOM" embed -m "$OK" -p w5 -f "$TMP/in.txt"
printf 'w5\nw6 w7\0 w8\nw9\n' >"$TMP/nul.txt"
expect_error "NUL byte names the line" "nul.txt:2: a NUL byte at column 6" "$LOOM" embed -m "$OK" -f "$TMP/nul.txt"
printf 'w5\0\n' | "$LOOM" embed -m "$OK" >"$TMP/out" 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "stdin:1: a NUL byte at column 3" "$TMP/err" && pass "NUL byte on stdin" \
    || fail "NUL on stdin: $(cat "$TMP/err")"
a=$(printf 'w5 w6\nw7\n' | "$LOOM" embed -m "$OK" -f - --format tsv 2>/dev/null)
b=$("$LOOM" embed -m "$OK" -f "$TMP/in.txt" --format tsv 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "-f - reads stdin" || fail "-f -: '$a'"
finish
