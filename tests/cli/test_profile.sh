#!/usr/bin/env bash
# loom profile: per-layer table and JSON, with accounting that adds up.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
if "$LOOM" profile -m "$M" -z "$Z" -p "Once upon a time" >"$TMP/table" 2>"$TMP/err"; then
    pass "profile table runs"
else
    fail "profile table: $(cat "$TMP/err")"
fi
grep -q "^prefill: " "$TMP/table" && grep -q "^decode: 1 token" "$TMP/table" \
    && pass "table has prefill and decode" || fail "table lacks phases"
grep -qE "^L4 " "$TMP/table" && grep -qE "^head " "$TMP/table" && grep -qE "^sample " "$TMP/table" \
    && grep -qE "^total " "$TMP/table" \
    && pass "table has layers, head, sampling, total" || fail "table rows missing"

"$LOOM" profile -m "$M" -z "$Z" --prompt-len 37 -t 2 --json --mode step_by_step >"$TMP/json" 2>"$TMP/err" \
    && pass "profile --json runs" || fail "profile --json: $(cat "$TMP/err")"
# Check the numbers against the model's shapes (stories260K: dim 64, hidden 172,
# 5 layers, 8 heads, 4 kv heads, vocab 512), computed here independently.
if python3 - "$TMP/json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
profs = {p["phase"]: p for p in d["profiles"]}
assert set(profs) == {"prefill", "decode"}, profs.keys()
dim, hid, L, H, KV, V = 64, 172, 5, 8, 4, 512
hd = dim // H
chain = ["rms_norm", "matmul", "matmul", "matmul", "rope", "rope", "kv_append", "kv_append",
         "attention", "matmul", "add", "rms_norm", "matmul", "matmul", "silu", "mul", "matmul", "add"]
for phase, n, pos in (("prefill", 37, 0), ("decode", 1, 37)):
    p = profs[phase]
    assert p["tokens"] == n and p["mode"] == "step_by_step"
    secs = p["sections"]
    assert [s["name"] for s in secs] == ["embed"] + [f"L{i}" for i in range(L)] + ["head", "sample"]
    for s in secs[1:-2]:
        assert s["kernels"] == len(chain), s
        assert [k.split(".")[0] for k in s["chain"]] == chain, s["chain"]
        # weights: wq, wo (dim x dim), wk, wv (kv_dim x dim), w1, w2, w3 (hid x dim), 2 norms
        weights = 4 * (2 * dim * dim + 2 * (KV * hd) * dim + 3 * hid * dim + 2 * dim)
        assert s["bytes_read"] > weights, (s["bytes_read"], weights)
        mm = 2 * n * (2 * dim * dim + 2 * KV * hd * dim + 3 * hid * dim)
        assert s["flops"] >= mm, (s["flops"], mm)
        assert s["time_ms"] >= 0
    head, sample = secs[-2], secs[-1]
    assert [k.split(".")[0] for k in head["chain"]] == ["rms_norm", "matmul"], head["chain"]
    assert head["bytes_written"] >= 4 * V
    # the sampler reads the logits once
    assert sample["chain"] == ["sample"] and sample["kernels"] == 1 and sample["bytes_read"] == 4 * V, sample
    assert sample["time_ms"] > 0, sample
    tot = p["total"]
    for key in ("kernels", "bytes_read", "bytes_written", "flops"):
        assert abs(tot[key] - sum(s[key] for s in secs)) <= 1e-6 * max(1, tot[key]), key
    assert tot["kernels"] == 1 + L * len(chain) + 2 + 1
PY
then pass "JSON accounting consistent with the model"; else fail "JSON accounting"; fi

# Side by side (the default): fused has fewer kernels and less traffic per layer.
"$LOOM" profile -m "$M" -z "$Z" --prompt-len 37 --decode-steps 3 --json >"$TMP/both" 2>"$TMP/err" \
    && pass "profile side by side --json runs" || fail "profile side by side: $(cat "$TMP/err")"
if python3 - "$TMP/both" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
profs = {(p["phase"], p["mode"]): p for p in d["report"]["profiles"]}
assert set(profs) == {(ph, m) for ph in ("prefill", "decode") for m in ("step_by_step", "fused")}, profs.keys()
assert profs[("decode", "fused")]["tokens"] == 1
for ph in ("prefill", "decode"):
    s, f = profs[(ph, "step_by_step")], profs[(ph, "fused")]
    for a, b in zip(s["sections"][1:-2], f["sections"][1:-2]):
        assert a["kernels"] >= 11 and b["kernels"] <= (4 if ph == "prefill" else 6), (a["kernels"], b["kernels"])
        assert b["bytes_read"] + b["bytes_written"] < a["bytes_read"] + a["bytes_written"]
        kinds = [k.split(".")[0] for k in b["chain"]]
        # the norms inside qkv_rope and ffn, the residual adds in the output projection and ffn;
        # in prefill the attention and its output projection are one attention_linear kernel
        assert "qkv_rope" in kinds and "ffn" in kinds, kinds
        assert "add_rms_norm" not in kinds and "rms_norm" not in kinds and "add" not in kinds, kinds
        if ph == "prefill":
            assert "attention_linear" in kinds and "linear" not in kinds, kinds
        else:
            assert "incre_flash_attention" in kinds and "linear" in kinds, kinds
    assert abs(f["total"]["flops"] - s["total"]["flops"]) <= 0.02 * s["total"]["flops"]
cmp = {c["phase"]: c for c in d["comparison"]}
assert cmp["prefill"]["traffic_reduction_pct"] > 10 and cmp["prefill"]["kernel_reduction_pct"] > 50, cmp
assert cmp["prefill"]["arena_bytes_fused"] < cmp["prefill"]["arena_bytes_step"], cmp
PY
then pass "fused profile: fewer kernels and bytes per layer"; else fail "fused profile"; fi
# Decode attention on threads its 4 kv heads do not share out over (3) runs
# split-KV, then a merge: one kernel more per layer than on 2 threads. The
# split needs more than one chunk of keys a head: chunks of 16 (block_kv).
sed -e 's/block_kv: auto/block_kv: 16/' "$(dirname "$0")/../../configs/fusion/default.yaml" >"$TMP/chunk16.yaml"
grep -q "block_kv: 16" "$TMP/chunk16.yaml" || fail "rules with block_kv 16"
for t in 2 3; do
    "$LOOM" profile -m "$M" -z "$Z" --prompt-len 37 -t "$t" --mode fused --rules "$TMP/chunk16.yaml" --json \
        >"$TMP/fused$t" 2>"$TMP/err" || fail "profile -t $t: $(cat "$TMP/err")"
done
# with the default chunks (512 keys) a head's keys are one chunk: no split, one kernel
"$LOOM" profile -m "$M" -z "$Z" --prompt-len 37 -t 3 --mode fused --json >"$TMP/fused3d" 2>"$TMP/err" \
    || fail "profile -t 3: $(cat "$TMP/err")"
if python3 - "$TMP/fused2" "$TMP/fused3" "$TMP/fused3d" <<'PY'
import json, sys
dec = [{p["phase"]: p for p in json.load(open(f))["profiles"]}["decode"] for f in sys.argv[1:4]]
assert dec[2]["total"]["kernels"] == dec[0]["total"]["kernels"], (dec[2]["total"], dec[0]["total"])
two, three = dec[0]["sections"][1:-2], dec[1]["sections"][1:-2]
assert len(two) == len(three) == 5
for a, b in zip(two, three):
    assert a["chain"] == b["chain"] and any(k.startswith("incre_flash_attention.") for k in a["chain"]), a
    assert b["kernels"] == a["kernels"] + 1, (a["kernels"], b["kernels"])
assert dec[1]["total"]["kernels"] == dec[0]["total"]["kernels"] + 5
PY
then pass "split-KV decode counts its merge"; else fail "split-KV decode kernels"; fi
# A bf16 KV cache halves the cache bytes: per layer, decode after 37 tokens reads
# 38 rows of K and V (4 kv heads x 8) at 2 bytes fewer each and writes one row
# of each at 2 bytes fewer, in both modes; nothing else changes.
for kv in f32 bf16; do
    "$LOOM" profile -m "$M" -z "$Z" --prompt-len 37 --kv-dtype "$kv" --json >"$TMP/kv_$kv" 2>"$TMP/err" \
        || fail "profile --kv-dtype $kv: $(cat "$TMP/err")"
done
if python3 - "$TMP/kv_f32" "$TMP/kv_bf16" <<'PY'
import json, sys
f32, bf16 = ({(p["phase"], p["mode"]): p for p in json.load(open(f))["report"]["profiles"]} for f in sys.argv[1:3])
kvd = 4 * 8
for mode in ("step_by_step", "fused"):
    a, b = f32[("decode", mode)]["sections"][1:-2], bf16[("decode", mode)]["sections"][1:-2]
    for x, y in zip(a, b):
        assert x["kernels"] == y["kernels"] and x["chain"] == y["chain"], (x, y)
        assert x["bytes_read"] - y["bytes_read"] == 38 * kvd * 2 * 2, (mode, x["bytes_read"], y["bytes_read"])
        assert x["bytes_written"] - y["bytes_written"] == kvd * 2 * 2, (mode, x["bytes_written"], y["bytes_written"])
PY
then pass "bf16 KV cache: cache traffic halved in the accounting"; else fail "bf16 KV cache accounting"; fi
# An i8 KV cache: 3 bytes fewer an element, plus one f32 scale per (position, kv head)
# row read (38 positions x 4 kv heads, K and V) and written (1 position).
"$LOOM" profile -m "$M" -z "$Z" --prompt-len 37 --kv-dtype i8 --json >"$TMP/kv_i8" 2>"$TMP/err" \
    || fail "profile --kv-dtype i8: $(cat "$TMP/err")"
if python3 - "$TMP/kv_f32" "$TMP/kv_i8" <<'PY'
import json, sys
f32, i8 = ({(p["phase"], p["mode"]): p for p in json.load(open(f))["report"]["profiles"]} for f in sys.argv[1:3])
kvd = 4 * 8
for mode in ("step_by_step", "fused"):
    a, b = f32[("decode", mode)]["sections"][1:-2], i8[("decode", mode)]["sections"][1:-2]
    assert len(a) == len(b) == 5
    for x, y in zip(a, b):
        assert x["kernels"] == y["kernels"] and x["chain"] == y["chain"], (x, y)
        assert x["bytes_read"] - y["bytes_read"] == 38 * (kvd * 3 - 4 * 4) * 2, (mode, x["bytes_read"], y["bytes_read"])
        assert x["bytes_written"] - y["bytes_written"] == (kvd * 3 - 4 * 4) * 2, \
            (mode, x["bytes_written"], y["bytes_written"])
PY
then pass "i8 KV cache: cache bytes and scales in the accounting"; else fail "i8 KV cache accounting"; fi
"$LOOM" profile -m "$M" -z "$Z" --prompt-len 8 >"$TMP/table2" 2>"$TMP/err" \
    && grep -q "^prefill: traffic .* kernels 94 -> 23" "$TMP/table2" \
    && pass "table shows the reductions" || fail "table reductions: $(grep '^prefill: traffic' "$TMP/table2") $(cat "$TMP/err")"
# --prompt-len on a vocabulary without BOS (the Qwen2 fixture): plain ids, no -1
QW="$(dirname "$0")/../fixtures/families/qwen2"
"$LOOM" profile -m "$QW" --prompt-len 8 -t 1 >"$TMP/qw" 2>"$TMP/err" && grep -q "^prefill: 8 tokens" "$TMP/qw" \
    && pass "--prompt-len without a BOS token" || fail "--prompt-len without BOS: $(cat "$TMP/err")"
# -np N: the decode step of N sequences on the batch engine, timed, in both modes
"$LOOM" profile -m "$M" -z "$Z" --prompt-len 12 -np 4 -t 2 -r 2 --json >"$TMP/np" 2>"$TMP/err" \
    && pass "profile -np 4 runs" || fail "profile -np 4: $(cat "$TMP/err")"
if python3 - "$TMP/np" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
profs = d["report"]["profiles"]
dec = [p for p in profs if p["phase"] == "decode"]
pre = [p for p in profs if p["phase"] == "prefill"]
assert {p["mode"] for p in dec} == {"step_by_step", "fused"}, dec
for p in pre:
    assert p["tokens"] == 12, p["tokens"]
for p in dec:
    assert p["tokens"] == 4, p["tokens"]  # one row per sequence
    layers = [s for s in p["sections"] if s["name"].startswith("L")]
    assert len(layers) == 5 and all(s["time_ms"] > 0 for s in layers), layers
    chains = [k.split(".")[0] for s in layers for k in s["chain"]]
    assert "paged_attention" in chains, chains  # the engine's program, not the model's
PY
then pass "-np: a timed decode step of 4 rows over the paged cache"; else fail "-np JSON"; fi
"$LOOM" profile -m "$M" -z "$Z" --prompt-len 8 -np 300 >/dev/null 2>"$TMP/err" \
    && fail "-np 300 accepted" || { grep -q "\-np must be in 1..256" "$TMP/err" && pass "-np out of range: an error" \
    || fail "-np 300: $(cat "$TMP/err")"; }
finish
