#!/usr/bin/env bash
# loom plan: analytic per-layer table without weights; hardware profiles; SVG.
# Needs no shared data.
source "$(dirname "$0")/lib.sh" "$@"
LOOM="$(cd "$(dirname "$LOOM")" && pwd)/$(basename "$LOOM")"
S260="$(cd "$S260" 2>/dev/null && pwd || echo "$S260")"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$TMP"  # the built-in profiles must work from any directory

if "$LOOM" plan --config llama2-7b --seq 512 --hw h200 >"$TMP/table" 2>"$TMP/err"; then
    pass "plan table runs"
else
    fail "plan table: $(cat "$TMP/err")"
fi
grep -q "^kernels  *18" "$TMP/table" && grep -q "^MB traffic" "$TMP/table" \
    && grep -q "same in every layer" "$TMP/table" && grep -q "matmul(ffn_down)" "$TMP/table" \
    && pass "table has per-layer rows and the kernel list" || fail "table rows missing"

"$LOOM" plan --config llama2-70b --batch 4 --seq 1000 --phase decode --kv-dtype int8 --wtype q4_0 \
    --hw ascend-910b --mode step_by_step --json >"$TMP/json" 2>"$TMP/err" \
    && pass "plan --json runs" || fail "plan --json: $(cat "$TMP/err")"
# Hand calculation for one decode layer of Llama2-70B (dim 8192, ffn 28672, 64 heads,
# 8 kv heads of 128), batch 4 after 1000 cached tokens, q4_0 weights, int8 cache.
if python3 - "$TMP/json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["phase"] == "decode" and d["batch"] == 4 and d["tokens"] == 4 and d["n_layers"] == 80
m = d["modes"][0]
assert m["mode"] == "step_by_step"
L = m["layer"]
D, F, H, KV, HD, T, pos = 8192, 28672, 64, 8, 128, 4, 1000
Q, K = H * HD, KV * HD
q4 = 18 / 32                      # bytes per q4_0 weight
W = (Q * D + 2 * K * D + D * Q + 3 * F * D) * q4
act_r = (2 * (T * D * 4 + D * 4)                       # norms
         + T * 4 * (D * 3 + Q + 2 * D + F)              # matmul inputs (q,k,v,o,gate,up,down)
         + T * (Q + K) * 4 + 2 * T * K * 4              # rope, kv_append
         + T * Q * 4 + 4 * (pos + 1) * K * 2 * 1        # attention: q, int8 cache rows of 4 sequences
         + 4 * (pos + 1) * KV * 2 * 4                    # and their f32 scales, one per (row, kv head)
         + 2 * 2 * T * D * 4 + T * F * 4 + 2 * T * F * 4)
assert L["bytes_read"] == W + act_r, (L["bytes_read"], W + act_r)
assert L["kernels"] == 18 and len(L["chain"]) == 18
assert len(m["kernels"]) == 18
assert abs(sum(k["time_s"] for k in m["kernels"]) - L["time_s"]) <= 1e-9 * L["time_s"]
# decode at batch 4 is memory bound on every kernel
assert all(k["bound"] == "memory" for k in m["kernels"]), [k for k in m["kernels"] if k["bound"] != "memory"]
assert d["hw"]["name"] == "ascend-910b" and d["hw"]["measured"] is False
PY
then pass "JSON numbers equal the hand calculation"; else fail "JSON hand calculation"; fi

# --act-dtype f16: every activation between kernels at 2 bytes in both modes; the weights (f16),
# the norms' f32 gammas and the f16 cache do not change. Hand calculation for one Llama2-7B
# prefill layer of 4096 tokens: traffic(f16) = fixed + (traffic(f32) - fixed) / 2.
for a in f32 f16; do
    "$LOOM" plan --config llama2-7b --seq 4096 --hw h200 --act-dtype $a --json >"$TMP/act_$a.json" 2>"$TMP/err" \
        || fail "plan --act-dtype $a: $(cat "$TMP/err")"
done
if python3 - "$TMP/act_f32.json" "$TMP/act_f16.json" <<'PY'
import json, sys
d32, d16 = (json.load(open(f)) for f in sys.argv[1:3])
assert d32["act_dtype"] == "f32" and d16["act_dtype"] == "f16"
D, F, S = 4096, 11008, 4096
fixed = (4 * D * D + 3 * D * F) * 2 + 2 * (2 * S * D * 2) + 2 * D * 4  # weights, KV written and read, gammas
for m32, m16 in zip(d32["modes"], d16["modes"]):
    t32 = m32["layer"]["bytes_read"] + m32["layer"]["bytes_written"]
    t16 = m16["layer"]["bytes_read"] + m16["layer"]["bytes_written"]
    assert abs(t16 - (fixed + (t32 - fixed) / 2)) < 1.0, (m32["mode"], t32, t16, fixed)
    assert m16["layer"]["kernels"] == m32["layer"]["kernels"]
# step_by_step at f32 by hand (docs/plan.md): weights, gammas, then 124 D + 32 F bytes a token
m = d32["modes"][0]
assert m["mode"] == "step_by_step"
assert abs(m["layer"]["bytes_read"] + m["layer"]["bytes_written"] -
           ((4 * D * D + 3 * D * F) * 2 + 2 * D * 4 + S * (124 * D + 32 * F))) < 1.0
PY
then pass "--act-dtype f16 halves the activations' bytes only (hand calculation)"; else fail "--act-dtype f16 bytes"; fi
"$LOOM" plan --config llama2-7b --seq 8 --act-dtype q8_0 >/dev/null 2>"$TMP/err" && fail "--act-dtype q8_0 accepted" \
    || { grep -q "act-dtype 'q8_0': expected f32, f16 or bf16" "$TMP/err" && pass "bad --act-dtype refused by name" \
         || fail "bad --act-dtype message: $(cat "$TMP/err")"; }

"$LOOM" plan --config tinyllama --seq 64 --hw h200 --svg "$TMP/plan.svg" >/dev/null 2>"$TMP/err" \
    && pass "plan --svg runs" || fail "plan --svg: $(cat "$TMP/err")"
python3 - "$TMP/plan.svg" <<'PY' && pass "SVG parses, one bar per op kind" || fail "SVG structure"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
assert root.tag == ns + "svg"
for panel in root.iter(ns + "g"):
    if panel.get("class") != "panel":
        continue
    kinds = [r.get("data-kind") for r in panel.iter(ns + "rect") if r.get("class") == "bar step"]
    assert len(kinds) == len(set(kinds)) and {"matmul", "rms_norm", "attention"} <= set(kinds), kinds
PY

# the fusion rules are the same as loom profile's: --rules with the attention rule disabled
# leaves the attention primitive unfused (only when the fusion engine is built in)
RULES_SRC="$REPO/configs/fusion/default.yaml"
if "$LOOM" plan --config tinyllama --seq 8 --hw h200 --json | grep -q '"fusion_available":true'; then
    sed 's/^\(    fused_op: fused_infer_attention\)$/\1\n    enabled: false/' "$RULES_SRC" >"$TMP/rules.yaml"
    grep -q "enabled: false" "$TMP/rules.yaml" || fail "could not disable the attention rule"
    "$LOOM" plan --config tinyllama --seq 64 --hw h200 --mode fused --rules "$TMP/rules.yaml" \
        >"$TMP/norules" 2>"$TMP/err" || fail "plan --rules: $(cat "$TMP/err")"
    "$LOOM" plan --config tinyllama --seq 64 --hw h200 --mode fused >"$TMP/rules" 2>"$TMP/err"
    if grep -q "^op chain.* attention " "$TMP/norules" \
        && ! grep -q "^op chain.* attention " "$TMP/rules" \
        && grep -q "flash_attention_score" "$TMP/rules"; then
        pass "plan --rules: a disabled rule leaves its part unfused"
    else
        fail "plan --rules: $(grep '^op chain' "$TMP/norules" "$TMP/rules")"
    fi
    # the rules' hardware isa pins the level plan models, whatever this CPU: Llama2-7B at 4096
    # tokens on 2 threads (row_min 256) is 4 kernels a layer at avx2 (the ffn's rows pass) and 5 at
    # avx512
    for lv in avx2:4 avx512:5; do
        sed -e "s/^  isa: auto$/  isa: ${lv%:*}/" -e "s/^  threads: auto$/  threads: 2/" "$RULES_SRC" >"$TMP/isa.yaml"
        grep -q "^  isa: ${lv%:*}$" "$TMP/isa.yaml" || fail "could not set isa: ${lv%:*}"
        "$LOOM" plan --config llama2-7b --seq 4096 --rules "$TMP/isa.yaml" >"$TMP/isa.out" 2>"$TMP/err" ||
            fail "plan isa ${lv%:*}: $(cat "$TMP/err")"
        if grep -q "^fused vs step_by_step per layer: .*kernels 18 -> ${lv#*:}," "$TMP/isa.out"; then
            pass "plan --rules with isa: ${lv%:*}: ${lv#*:} kernels a layer"
        else
            fail "plan isa ${lv%:*}: $(grep '^fused vs' "$TMP/isa.out")"
        fi
    done
fi

# loom profile --svg draws the same chart from an executed model (needs the shared stories260K)
if [ -f "$S260/stories260K.bin" ] && [ -f "$S260/tok512.bin" ]; then
    if "$LOOM" profile -m "$S260/stories260K.bin" -z "$S260/tok512.bin" --prompt-len 20 \
            --svg "$TMP/prof.svg" >/dev/null 2>"$TMP/err"; then
        python3 - "$TMP/prof.svg" <<'PY' && pass "profile --svg parses, bars per op kind" || fail "profile --svg structure"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
bars = [r for r in root.iter(ns + "rect") if (r.get("class") or "").startswith("bar ")]
kinds = {r.get("data-kind") for r in bars}
assert {"matmul", "rms_norm"} <= kinds, kinds
assert all(float(r.get("width")) >= 0 for r in bars)
PY
    else
        fail "profile --svg: $(cat "$TMP/err")"
    fi
elif [ -n "${CI:-}" ]; then
    fail "shared models missing under $MODELS (CI must have ../shared)"
fi

# errors: one clear line, exit 1
"$LOOM" plan --arch bert --config bert-base --batch 4 --seq 128 --hw h200 >"$TMP/bert" 2>"$TMP/err" \
    && grep -q "^kernels " "$TMP/bert" && grep -q "flash_attention_score" "$TMP/bert" \
    && pass "plan bert-base" || fail "plan bert-base: $(cat "$TMP/err")"
expect_error "bert has no decode" "bert-base: BERT is an encoder: it has no decode phase" \
    "$LOOM" plan --arch bert --config bert-base --seq 128 --phase decode --hw h200
expect_error "arch mismatch" "llama2-7b is not a bert model" \
    "$LOOM" plan --arch bert --config llama2-7b --seq 128 --hw h200
expect_error "unknown config" "unknown model config 'llama9'.*llama2-7b" \
    "$LOOM" plan --config llama9 --seq 8 --hw h200
expect_error "unknown hw" "hw profile 'nope'.*h200" "$LOOM" plan --config tinyllama --seq 8 --hw nope
printf 'name: bad\nbandwidth: 1e12\npeak_flops:\n  f16: lots\n' >"$TMP/bad.yaml"
expect_error "hw value error has file:line:column" "bad.yaml:4:8: f16: bad value 'lots'" \
    "$LOOM" plan --config tinyllama --seq 8 --hw "$TMP/bad.yaml"
printf 'name: bad\nbandwith: 1e12\n' >"$TMP/bad2.yaml"
expect_error "hw unknown key has file:line:column" "bad2.yaml:2:1: unknown key 'bandwith'" \
    "$LOOM" plan --config tinyllama --seq 8 --hw "$TMP/bad2.yaml"
# absurd values are refused by field and position (they printed inf / nan with exit 0)
printf 'name: absurd\nbandwidth: 1e-300\npeak_flops:\n  f16: 1e12\n' >"$TMP/absurd.yaml"
expect_error "hw bandwidth 1e-300 out of range" "--hw: .*absurd.yaml:2:12: bandwidth: 1e-300 .* out of range" \
    "$LOOM" plan --config tinyllama --seq 8 --hw "$TMP/absurd.yaml"
[ ! -s "$TMP/out" ] && pass "no table after a refused profile" || fail "absurd hw printed: $(head -3 "$TMP/out")"
printf 'name: absurd\nbandwidth: 1e12\npeak_flops:\n  f16: 1e-300\n' >"$TMP/absurd2.yaml"
expect_error "hw peak 1e-300 out of range" "absurd2.yaml:4:8: f16: 1e-300 .* out of range" \
    "$LOOM" plan --config tinyllama --seq 8 --hw "$TMP/absurd2.yaml"
expect_error "bad kv dtype" "kv-dtype 'q4_0'" "$LOOM" plan --config tinyllama --seq 8 --kv-dtype q4_0 --hw h200
expect_error "bad phase" "phase 'both'" "$LOOM" plan --config tinyllama --seq 8 --phase both --hw h200
finish
