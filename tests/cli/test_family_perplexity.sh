#!/usr/bin/env bash
# loom perplexity on the tiny model of each family against transformers:
# scripts/make_family_fixtures.py computed, with transformers, the perplexity
# of each fixture model on its ppl.txt as llama.cpp's llama-perplexity scores
# it (ppl.json: chunks of ctx tokens, BOS first in each chunk when the
# tokenizer adds one, the second half scored, the final value, its +/- error,
# the running value after each chunk, the number of tokens). For every family
# folder in the fixtures, `loom perplexity -c ctx` must agree to 1e-4
# relative in the final value, the error and every running value, and find
# the same number of tokens, from
#   - the Hugging Face folder (fused, step_by_step, fused_with_checkpoints),
#   - the GGUF `loom convert` writes of it,
#   - the GGUF llama.cpp's convert_hf_to_gguf.py writes of it (a fixture's
#     llama-cpp.gguf, or LOOM_LLAMA_CPP_DIR and a Python with torch and
#     transformers to run the converter now; else skipped, and said). A
#     family whose ppl.json has "full" (Mistral: llama.cpp's converter writes
#     no sliding window) is checked against the full-attention values there.
# LOOM_FAMILY_FIXTURES=DIR uses fixtures made elsewhere; =regenerate makes
# them anew with the script first (needs that Python). CI runs the committed
# fixtures (no torch there).
source "$(dirname "$0")/lib.sh" "$@"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
FIX="${LOOM_FAMILY_FIXTURES:-$ROOT/tests/fixtures/families}"

# the first Python that imports torch and transformers (not loom dependencies), or nothing
find_python() {
    local py
    for py in "${LOOM_HF_PYTHON:-}" "$ROOT/.venv/bin/python" python3; do
        [ -n "$py" ] && "$py" -c 'import torch, transformers, tokenizers' >/dev/null 2>&1 && { echo "$py"; return; }
    done
}
PY=""
if [ "$FIX" = regenerate ] || [ -n "${LOOM_LLAMA_CPP_DIR:-}" ]; then PY=$(find_python); fi
if [ "$FIX" = regenerate ]; then
    if [ -z "$PY" ]; then
        echo "SKIP: no Python with torch and transformers to regenerate the fixtures (set LOOM_HF_PYTHON)" >&2
        exit 77
    fi
    FIX="$TMP/fixtures"
    "$PY" "$ROOT/scripts/make_family_fixtures.py" "$FIX" >"$TMP/make.log" 2>&1 \
        || { cat "$TMP/make.log" >&2; echo "FAIL: scripts/make_family_fixtures.py" >&2; exit 1; }
fi
LC_DIR=""
LC_WHY="LOOM_LLAMA_CPP_DIR unset"
if [ -n "${LOOM_LLAMA_CPP_DIR:-}" ]; then
    if [ -z "$PY" ]; then
        LC_WHY="no Python with torch and transformers to run its converter"
    else
        mkdir -p "$TMP/llama-cpp"
        if "$PY" "$ROOT/scripts/make_family_fixtures.py" --llama-cpp-only "$LOOM_LLAMA_CPP_DIR" "$FIX" "$TMP/llama-cpp" \
            >"$TMP/lc.log" 2>&1; then
            LC_DIR="$TMP/llama-cpp"
        else
            tail -20 "$TMP/lc.log" >&2
            fail "llama.cpp's convert_hf_to_gguf.py failed on $FIX"
            LC_WHY="its conversion failed"
        fi
    fi
fi

# check WHAT MODEL PPL_JSON KEY [loom options]: loom perplexity on the family's ppl.txt
# against ppl.json (KEY: "" for the values of the model as it is, "full" for full attention)
check() {
    local what="$1" model="$2" json="$3" key="$4"; shift 4
    local ctx; ctx=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ctx"])' "$json")
    if ! "$LOOM" perplexity -m "$model" -f "$(dirname "$json")/ppl.txt" -c "$ctx" -t 2 "$@" \
        >"$TMP/out" 2>"$TMP/err"; then
        fail "$what: loom perplexity failed: $(head -c 400 "$TMP/err")"
        return
    fi
    local msg
    if msg=$(python3 - "$json" "$key" "$TMP/out" "$TMP/err" <<'EOF'
import json, re, sys
ref = json.load(open(sys.argv[1]))
vals = ref[sys.argv[2]] if sys.argv[2] else ref
out, err = open(sys.argv[3]).read(), open(sys.argv[4]).read()
m = re.search(r"^Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)$", out, re.M)
running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", out)]
n = re.search(r"loom perplexity: (\d+) tokens,", err)
if not m or not n:
    sys.exit("no final line or token count in: " + out + err)
rel = lambda a, b: abs(a - b) / abs(b)
errs = [rel(float(m.group(1)), vals["ppl"]), rel(float(m.group(2)), vals["error"])]
errs += [rel(a, b) for a, b in zip(running, vals["running"])]
problems = []
if int(n.group(1)) != ref["n_tokens"]:
    problems.append("%s tokens, transformers' tokenizer %d" % (n.group(1), ref["n_tokens"]))
if len(running) != len(vals["running"]):
    problems.append("%d running values, expected %d" % (len(running), len(vals["running"])))
if max(errs) > 1e-4:
    problems.append("PPL %s +/- %s, transformers %.4f +/- %.5f; largest relative difference %.2e > 1e-4" % (
        m.group(1), m.group(2), vals["ppl"], vals["error"], max(errs)))
print("PPL %s +/- %s (transformers %.4f +/- %.5f, %d chunks, largest relative difference %.1e)" % (
    m.group(1), m.group(2), vals["ppl"], vals["error"], len(running), max(errs)))
sys.exit("; ".join(problems) if problems else 0)
EOF
    ); then
        pass "$what: $msg"
    else
        fail "$what: $msg"
    fi
}

n=0
for dir in "$FIX"/*/; do
    dir="${dir%/}"
    [ -f "$dir/config.json" ] || continue
    family=$(basename "$dir")
    n=$((n + 1))
    json="$dir/ppl.json"
    if [ ! -f "$json" ] || [ ! -f "$dir/ppl.txt" ]; then
        fail "$family: no ppl.json / ppl.txt (run scripts/make_family_fixtures.py)"
        continue
    fi
    for mode in fused step_by_step fused_with_checkpoints; do
        check "$family safetensors $mode" "$dir" "$json" "" --mode "$mode"
    done
    if "$LOOM" convert "$dir" "$TMP/$family.gguf" >/dev/null 2>"$TMP/err"; then
        check "$family gguf (loom convert)" "$TMP/$family.gguf" "$json" ""
    else
        fail "$family: loom convert: $(head -c 300 "$TMP/err")"
    fi
    lc=""
    if [ -f "$dir/llama-cpp.gguf" ]; then lc="$dir/llama-cpp.gguf"
    elif [ -n "$LC_DIR" ] && [ -f "$LC_DIR/$family.gguf" ]; then lc="$LC_DIR/$family.gguf"
    fi
    if [ -z "$lc" ]; then
        echo "skip $family llama.cpp gguf: $LC_WHY"
        continue
    fi
    if [ -f "$dir/logits_llama_cpp.f32" ]; then
        # Gemma: llama.cpp's converter leaves out metadata (query_pre_attn_scalar, the RoPE base, the
        # layer pattern), so its GGUF is another model, whose logits test_families checks instead
        echo "skip $family llama.cpp gguf: the converter's metadata describes another model (test_families checks its logits)"
        continue
    fi
    key=""
    python3 -c 'import json, sys; sys.exit("full" not in json.load(open(sys.argv[1])))' "$json" && key=full
    check "$family llama.cpp gguf${key:+ (no window: against full attention)}" "$lc" "$json" "$key"
done
[ "$n" -gt 0 ] || fail "no family fixtures under $FIX"
finish
