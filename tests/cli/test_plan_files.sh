#!/usr/bin/env bash
# loom plan --config FILE: a Hugging Face config.json (or its folder) or a
# GGUF file's metadata gives the same plan as the built-in configuration of
# the same shapes; files that are neither, or lack a field, are clear errors.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
# the per-mode numbers of two --json plans, without the config's name
same_plan() {  # NAME ARGS_A -- ARGS_B
    local name="$1"; shift
    local a=() b=() side=a
    for x in "$@"; do
        if [ "$x" = "--" ]; then side=b; continue; fi
        if [ $side = a ]; then a+=("$x"); else b+=("$x"); fi
    done
    # a fixed hardware profile: "cpu" is measured at every run
    "$LOOM" plan "${a[@]}" --hw h200 --json >"$TMP/a.json" 2>"$TMP/err" && "$LOOM" plan "${b[@]}" --hw h200 --json >"$TMP/b.json" 2>>"$TMP/err"
    if [ $? -eq 0 ] && python3 - "$TMP/a.json" "$TMP/b.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["config"] != b["config"]
assert a["n_layers"] == b["n_layers"] and a["tokens"] == b["tokens"]
for ma, mb in zip(a["modes"], b["modes"]):
    assert ma["layer"] == mb["layer"] and ma["total"] == mb["total"] and ma["kernels"] == mb["kernels"], ma["mode"]
assert len(a["modes"]) == len(b["modes"]) == 2
PY
    then pass "$name"; else fail "$name: $(cat "$TMP/err")"; fi
}

# SmolLM2-135M's published config.json, by hand
mkdir -p "$TMP/smol"
cat >"$TMP/smol/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
 "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
 "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 100000, "tie_word_embeddings": true,
 "hidden_act": "silu"}
JSON
same_plan "config.json = smollm2-135m" --config "$TMP/smol/config.json" --seq 64 -- --config smollm2-135m --seq 64
same_plan "config.json's folder, decode" --config "$TMP/smol" --seq 300 --phase decode -- \
    --config smollm2-135m --seq 300 --phase decode
cat >"$TMP/bert.json" <<'JSON'
{"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768, "intermediate_size": 3072,
 "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 30522, "max_position_embeddings": 512,
 "layer_norm_eps": 1e-12, "hidden_act": "gelu"}
JSON
same_plan "BERT config.json = bert-base" --config "$TMP/bert.json" --seq 128 --batch 2 -- \
    --config bert-base --seq 128 --batch 2

# a GGUF's metadata: stories260K converted, against its shapes written as a config.json
"$LOOM" convert "$S260/stories260K.bin" "$TMP/s.gguf" -z "$S260/tok512.bin" >/dev/null 2>&1 || fail "convert"
cat >"$TMP/s260.json" <<'JSON'
{"model_type": "llama", "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 5,
 "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 512, "max_position_embeddings": 512,
 "rms_norm_eps": 1e-05, "tie_word_embeddings": true}
JSON
same_plan "GGUF metadata = the same shapes as config.json" --config "$TMP/s.gguf" --seq 32 -- --config "$TMP/s260.json" --seq 32
"$LOOM" plan --config "$TMP/s.gguf" --seq 32 --mode step_by_step >"$TMP/out" 2>&1
head -1 "$TMP/out" | grep -qF "$TMP/s.gguf: 5 layers, dim 64, ffn 172, 8 heads (4 kv), vocab 512  [GGUF metadata]" \
    && pass "plan header names the file and its source" || fail "plan header: $(head -1 "$TMP/out")"

# errors
expect_error "neither GGUF nor JSON" "--config: '.*stories260K.bin' is neither a GGUF file .* nor a Hugging Face config.json" \
    "$LOOM" plan --config "$S260/stories260K.bin" --seq 8
printf '{"model_type": "llama", "hidden_size": 64}' >"$TMP/short.json"
expect_error "config.json without a field" "--config: .*short.json.*intermediate_size" \
    "$LOOM" plan --config "$TMP/short.json" --seq 8
mkdir -p "$TMP/empty_dir"
expect_error "folder without config.json" "--config: .*empty_dir/config.json: cannot open" \
    "$LOOM" plan --config "$TMP/empty_dir" --seq 8
python3 - "$TMP/s.gguf" "$TMP/mamba.gguf" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
old = struct.pack('<Q', 5) + b'llama'
i = b.find(old); assert i > 0
b[i:i + len(old)] = struct.pack('<Q', 5) + b'mamba'
open(sys.argv[2], 'wb').write(b)
PY
expect_error "GGUF of another architecture" "--config: .*unsupported architecture 'mamba'" \
    "$LOOM" plan --config "$TMP/mamba.gguf" --seq 8
expect_error "unknown name" "unknown model config 'llama9'.*or the path of a config.json" \
    "$LOOM" plan --config llama9 --seq 8
expect_error "--arch against a file's architecture" "is not a bert model" \
    "$LOOM" plan --config "$TMP/s.gguf" --arch bert --seq 8
finish
