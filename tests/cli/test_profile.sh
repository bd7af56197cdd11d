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
grep -qE "^L4 " "$TMP/table" && grep -qE "^head " "$TMP/table" && grep -qE "^total " "$TMP/table" \
    && pass "table has layers, head, total" || fail "table rows missing"

"$LOOM" profile -m "$M" -z "$Z" --prompt-len 37 -t 2 --json >"$TMP/json" 2>"$TMP/err" \
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
    assert [s["name"] for s in secs] == ["embed"] + [f"L{i}" for i in range(L)] + ["head"]
    for s in secs[1:-1]:
        assert s["kernels"] == len(chain), s
        assert [k.split(".")[0] for k in s["chain"]] == chain, s["chain"]
        # weights: wq, wo (dim x dim), wk, wv (kv_dim x dim), w1, w2, w3 (hid x dim), 2 norms
        weights = 4 * (2 * dim * dim + 2 * (KV * hd) * dim + 3 * hid * dim + 2 * dim)
        assert s["bytes_read"] > weights, (s["bytes_read"], weights)
        mm = 2 * n * (2 * dim * dim + 2 * KV * hd * dim + 3 * hid * dim)
        assert s["flops"] >= mm, (s["flops"], mm)
        assert s["time_ms"] >= 0
    head = secs[-1]
    assert [k.split(".")[0] for k in head["chain"]] == ["rms_norm", "matmul"], head["chain"]
    assert head["bytes_written"] >= 4 * V
    tot = p["total"]
    for key in ("kernels", "bytes_read", "bytes_written", "flops"):
        assert abs(tot[key] - sum(s[key] for s in secs)) <= 1e-6 * max(1, tot[key]), key
    assert tot["kernels"] == 1 + L * len(chain) + 2
PY
then pass "JSON accounting consistent with the model"; else fail "JSON accounting"; fi
finish
