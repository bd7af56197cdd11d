#!/usr/bin/env bash
# loom bench against llama.cpp's llama-bench on the same GGUF, threads and
# token counts, in the same run; prints the ratio loom/llama.cpp for each
# prompt-processing (ppN) and generation (tgN) test.
#
# llama.cpp is built from the llama-cpp-python source distribution (its
# vendored llama.cpp has tools/llama-bench), downloaded with pip into a folder
# OUTSIDE this repository ($LLAMA_CPP_DIR, default /tmp/loom-peer-llama-cpp);
# it is never a dependency of loom. Needs cmake, a C++ compiler, and python3
# with pip.
#
# usage: bench/peers/llama_cpp.sh [MODEL.gguf] [THREADS=1,2] [PP=512] [TG=128] [REPS=5] [MODES=fused,step_by_step]
#                                 [DEPTH=0] [KV=f32] [PEER_KV=f16]
#   DEPTH: tokens already in the KV cache (-d of both tools, e.g. 0,2048)
#   KV: loom's KV cache dtypes (--kv-dtype, e.g. f32,f16); llama.cpp runs with
#       one cache type, PEER_KV (-ctk and -ctv; default f16, its default; q8_0 is
#       its 8-bit cache, which needs flash attention: -fa on), against each of them
#   LOOM=path/to/loom (default build/loom)
set -euo pipefail
cd "$(dirname "$0")/../.."
MDIR="${LOOM_MODELS_DIR:-$HOME/.cache/loom/models}"
MODEL="${1:-$MDIR/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${2:-1,2}"
PP="${3:-512}"
TG="${4:-128}"
REPS="${5:-5}"
MODES="${6:-fused,step_by_step}"
DEPTH="${7:-0}"
KV="${8:-f32}"
PEER_KV="${9:-f16}"
LOOM="${LOOM:-build/loom}"
PEER="${LLAMA_CPP_DIR:-/tmp/loom-peer-llama-cpp}"

case "$(realpath -m "$PEER")/" in
    "$(realpath .)"/*) echo "llama_cpp.sh: LLAMA_CPP_DIR must be outside the repository" >&2; exit 1 ;;
esac
[ -f "$MODEL" ] || { echo "llama_cpp.sh: no model $MODEL (scripts/fetch-models.sh)" >&2; exit 1; }
[ -x "$LOOM" ] || { echo "llama_cpp.sh: no loom binary at $LOOM" >&2; exit 1; }

BENCH="$PEER/llama-bench"
if [ ! -x "$BENCH" ]; then
    mkdir -p "$PEER"
    if ! ls "$PEER"/llama_cpp_python-*.tar.gz >/dev/null 2>&1; then
        echo "llama_cpp.sh: downloading the llama-cpp-python source distribution into $PEER" >&2
        python3 -m pip download --quiet --no-binary :all: --no-deps llama-cpp-python -d "$PEER" >&2
    fi
    sdist=$(ls "$PEER"/llama_cpp_python-*.tar.gz | sort | tail -n1)
    src="$PEER/src"
    rm -rf "$src" && mkdir -p "$src"
    tar -xzf "$sdist" -C "$src" --strip-components=1
    lc="$src/vendor/llama.cpp"
    [ -f "$lc/tools/llama-bench/llama-bench.cpp" ] || {
        echo "llama_cpp.sh: this sdist has no tools/llama-bench" >&2; exit 1; }
    echo "llama_cpp.sh: building llama-bench (CPU, native)" >&2
    cmake -S "$lc" -B "$lc/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >&2
    cmake --build "$lc/build" --target llama-bench -j "$(nproc)" >&2
    cp "$lc/build/bin/llama-bench" "$BENCH"
    sed -n 's/^version = "\(.*\)"/\1/p' "$src/pyproject.toml" >"$PEER/VERSION" 2>/dev/null || true
fi

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
echo "== loom bench -m $MODEL -p $PP -n $TG -t $THREADS -d $DEPTH --kv-dtype $KV --mode $MODES -r $REPS"
"$LOOM" bench -m "$MODEL" -p "$PP" -n "$TG" -t "$THREADS" -d "$DEPTH" --kv-dtype "$KV" --mode "$MODES" -r "$REPS" \
    --json >"$OUT/loom.json"
FA=()
[ "$PEER_KV" = f16 ] || [ "$PEER_KV" = f32 ] || FA=(-fa on) # a quantized V cache needs flash attention
echo "== llama-bench -m $MODEL -p $PP -n $TG -t $THREADS -d $DEPTH -ctk $PEER_KV -ctv $PEER_KV ${FA[*]} -r $REPS -o json"
"$BENCH" -m "$MODEL" -p "$PP" -n "$TG" -t "$THREADS" -d "$DEPTH" -ctk "$PEER_KV" -ctv "$PEER_KV" "${FA[@]}" \
    -r "$REPS" -o json >"$OUT/llama.json" 2>"$OUT/llama.err" || { cat "$OUT/llama.err" >&2; exit 1; }

python3 - "$OUT/loom.json" "$OUT/llama.json" "$PEER_KV" <<'PY'
import json, statistics, sys
loom = json.load(open(sys.argv[1]))  # llama-bench's field names: one object per test
peer = json.load(open(sys.argv[2]))
ref = {}
for r in peer:
    test = ("pp%d" % r["n_prompt"]) if r["n_prompt"] > 0 else ("tg%d" % r["n_gen"])
    ts = r.get("samples_ts") or [r["avg_ts"]]
    ref[(r["n_threads"], test, r.get("n_depth", 0))] = (statistics.median(ts), r.get("stddev_ts", 0.0))
print("| test | threads | loom mode | loom KV | loom t/s (median) | llama.cpp t/s (median, %s KV) "
      "| loom / llama.cpp |" % sys.argv[3])
print("|---|---:|---|---|---:|---:|---:|")
for r in loom:
    depth = r.get("n_depth", 0)
    name = ("pp%d" % r["n_prompt"]) if r["n_prompt"] > 0 else ("tg%d" % r["n_gen"])
    key = (r["n_threads"], name, depth)
    if key not in ref:
        continue
    lt, pt = r["median_ts"], ref[key][0]
    test = name + (" @ d%d" % depth if depth else "")
    print("| %s | %d | %s | %s | %.2f | %.2f | %.2f |" % (test, r["n_threads"], r["mode"], r["type_k"],
                                                     lt, pt, lt / pt))
PY
