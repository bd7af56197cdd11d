#!/usr/bin/env bash
# loom profile without -m profiles the default model and names it in its
# header (it printed "model (null)"); rules-file errors are labelled --rules.
source "$(dirname "$0")/lib.sh" "$@"
MDIR="${LOOM_MODELS_DIR:-$HOME/.cache/loom/models}"
M="$MDIR/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$M" ]; then
    if [ -n "${CI:-}" ]; then
        echo "FAIL: $M missing (CI runs scripts/fetch-models.sh through scripts/setup.sh)" >&2
        exit 1
    fi
    echo "SKIP: $M missing (run scripts/fetch-models.sh)" >&2
    exit 77
fi
LOOM_MODELS_DIR="$MDIR" "$LOOM" profile --mode fused >"$TMP/out" 2>"$TMP/err"
[ $? -eq 0 ] && head -1 "$TMP/out" | grep -qF "model $M: 30 layers" && ! grep -q "(null)" "$TMP/out" \
    && pass "profile without -m: the default model in the header" || fail "profile header: $(head -2 "$TMP/out") $(cat "$TMP/err")"
LOOM_MODELS_DIR="$MDIR" "$LOOM" profile --mode fused --json >"$TMP/out" 2>"$TMP/err"
python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['model'] == sys.argv[2]" "$TMP/out" "$M" \
    && pass "profile --json without -m: the default model" || fail "profile --json model: $(head -c 200 "$TMP/out")"
expect_error "profile without -m and no default model" "no model given" env LOOM_MODELS_DIR="$TMP/none" "$LOOM" profile
printf 'rules: 3\n' >"$TMP/bad.yaml"
expect_error "profile --rules error labelled" "^loom profile: --rules: .*bad.yaml:1:[0-9]+: rules: expected a list" \
    "$LOOM" profile -m "$M" --rules "$TMP/bad.yaml"
finish
