#!/usr/bin/env bash
# Mixtures of experts in loom profile and loom plan: the fused chain of a
# Mixtral layer, and decode traffic that follows the experts used per token
# (top-k), not the experts a layer has.
source "$(dirname "$0")/lib.sh" "$@"
FIX="$(cd "$(dirname "$0")/../fixtures/families" && pwd)"

# the fixture (4 experts, top 2) and a copy choosing 1 expert per token
cp -r "$FIX/mixtral" "$TMP/k2"
cp -r "$FIX/mixtral" "$TMP/k1"
sed -i 's/"num_experts_per_tok": 2/"num_experts_per_tok": 1/' "$TMP/k1/config.json"
for k in k1 k2; do
    "$LOOM" convert "$TMP/$k" "$TMP/$k.gguf" >/dev/null 2>"$TMP/err" || fail "convert $k: $(cat "$TMP/err")"
    "$LOOM" profile -m "$TMP/$k.gguf" --prompt-len 9 -t 1 -r 1 --json --mode fused >"$TMP/$k.json" 2>"$TMP/err" \
        || fail "profile $k: $(cat "$TMP/err")"
done
if python3 - "$TMP/k1.json" "$TMP/k2.json" <<'PY'
import json, sys
def layer(path):
    d = json.load(open(path))
    p = [p for p in d["profiles"] if p["phase"] == "decode"][0]
    return p["sections"][1]
k1, k2 = layer(sys.argv[1]), layer(sys.argv[2])
chain = [c.split(".")[0] for c in k2["chain"]]
assert chain[-2:] == ["moe_gating_top_k_softmax", "moe_ffn"], chain
assert k2["kernels"] == len(chain) + 3, k2  # moe_ffn's 4 phases, one launch each
expert = 3 * 64 * 32 * 2  # gate, up, down of one f16 expert (width 64, dim 32)
diff = k2["bytes_read"] - k1["bytes_read"]
# one more expert's weights, plus the phase buffers of one more row (< 2 KB)
assert expert <= diff <= expert + 2048, (diff, expert)
PY
then pass "decode bytes per layer: one expert's weights more for top-2 than top-1"; else fail "MoE decode traffic"; fi

# loom plan: 8 experts instead of 4, same top 2: the same decode traffic in moe_ffn
cp "$FIX/mixtral/config.json" "$TMP/e8.json"
sed -i 's/"num_local_experts": 4/"num_local_experts": 8/' "$TMP/e8.json"
grep -q '"num_local_experts": 8' "$TMP/e8.json" || fail "could not make the 8-expert config"
"$LOOM" plan --config "$FIX/mixtral/config.json" --seq 16 --phase decode --json >"$TMP/e4.plan" 2>"$TMP/err" \
    || fail "plan e4: $(cat "$TMP/err")"
"$LOOM" plan --config "$TMP/e8.json" --seq 16 --phase decode --json >"$TMP/e8.plan" 2>"$TMP/err" \
    || fail "plan e8: $(cat "$TMP/err")"
if python3 - "$TMP/e4.plan" "$TMP/e8.plan" <<'PY'
import json, sys
def moe(path):
    d = json.load(open(path))
    m = [m for m in d["modes"] if m["mode"] == "fused"][0]
    return [k for k in m["kernels"] if k["op"] == "moe_ffn"][0]["bytes_read"]
e4, e8 = moe(sys.argv[1]), moe(sys.argv[2])
assert e4 == e8 and e4 > 2 * 3 * 64 * 32 * 2, (e4, e8)
PY
then pass "plan: decode moe_ffn bytes independent of the expert count"; else fail "plan MoE decode traffic"; fi
"$LOOM" plan --config "$FIX/qwen3moe/config.json" --seq 32 >"$TMP/q.plan" 2>"$TMP/err" \
    && grep -q "moe_gating_top_k_softmax moe_ffn" "$TMP/q.plan" && pass "plan: Qwen3-MoE config, fused chain" \
    || fail "plan qwen3moe: $(cat "$TMP/err")"

finish
