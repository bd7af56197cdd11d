#!/usr/bin/env bash
# loom serve vs llama.cpp's llama-server: the same GGUF, threads, parallel
# slots and KV context; the load from bench/serve/load.py (the openai client
# with asyncio) at 1, 8 and 32 concurrent clients, streamed greedy chat
# completions of mixed prompt lengths, each exactly MAX_TOKENS tokens
# (ignore_eos). Prints a markdown table of medians over REPS runs (results in
# bench/results/serve.md). Benchmarks run one at a time:
#   flock /tmp/loom-bench.lock bench/serve/bench_serve.sh [LOOM] [LLAMA_SERVER]
# Env: MODEL (SmolLM2-135M-Instruct Q4_1), THREADS (2), PARALLEL (32),
# MAX_TOKENS (128), REPS (3), LEVELS ("1 8 32"), VENV (a venv with openai,
# made under /tmp when missing: never part of the repository).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
LOOM="${1:-$HERE/../../build/loom}"
LLAMA="${2:-/tmp/loom-peer-llama-cpp/src/vendor/llama.cpp/build/bin/llama-server}"
MODEL="${MODEL:-${LOOM_MODELS_DIR:-$HOME/.cache/loom/models}/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${THREADS:-2}" PARALLEL="${PARALLEL:-32}" MAX_TOKENS="${MAX_TOKENS:-128}" REPS="${REPS:-3}"
LEVELS="${LEVELS:-1 8 32}"
VENV="${VENV:-/tmp/loom-bench-venv}"
CTX=$((PARALLEL * 1024))
[ -x "$LLAMA" ] || { echo "bench_serve: no llama-server at $LLAMA" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "bench_serve: no model at $MODEL" >&2; exit 1; }
if ! "$VENV/bin/python" -c "import openai" 2>/dev/null; then
    python3 -m venv "$VENV" && "$VENV/bin/pip" install --quiet openai
fi
OUT="${KEEP_DIR:-$(mktemp -d)}"
mkdir -p "$OUT"
PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; [ -n "${KEEP_DIR:-}" ] || rm -rf "$OUT"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_health() {
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
        kill -0 "$PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# run_server NAME MODEL_ID CMD...: starts CMD, runs every level REPS times, stops it
run_server() {
    local name="$1" id="$2"; shift 2
    "$@" >"$OUT/$name.log" 2>&1 &
    PID=$!
    wait_health "$PORT" || { echo "bench_serve: $name did not start: $(tail -5 "$OUT/$name.log")" >&2; exit 1; }
    for c in $LEVELS; do
        local n=$((c * 3 > 8 ? c * 3 : 8))
        for r in $(seq 1 "$REPS"); do
            "$VENV/bin/python" "$HERE/load.py" "http://127.0.0.1:$PORT/v1" "$id" --clients "$c" --requests "$n" \
                --max-tokens "$MAX_TOKENS" | tail -1 | sed "s/^{/{\"server\": \"$name\", /" >>"$OUT/results.jsonl"
        done
    done
    kill "$PID"; wait "$PID" 2>/dev/null || true
    PID=""
}

PORT=$(free_port)
run_server loom SmolLM2-135M-Instruct.Q4_1 "$LOOM" serve -m "$MODEL" --host 127.0.0.1 --port "$PORT" \
    -t "$THREADS" -np "$PARALLEL" -c "$CTX" --quiet
PORT=$(free_port)
run_server llama-server SmolLM2-135M-Instruct.Q4_1 "$LLAMA" -m "$MODEL" --host 127.0.0.1 --port "$PORT" \
    -t "$THREADS" -tb "$THREADS" -np "$PARALLEL" -c "$CTX" --no-webui
python3 - "$OUT/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(server, c, key):
    v = [r[key] for r in rows if r["server"] == server and r["clients"] == c]
    return statistics.median(v) if v else float("nan")
levels = sorted({r["clients"] for r in rows})
print("| clients | server | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | errors |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
for c in levels:
    for s in ("loom", "llama-server"):
        print("| %d | %s | %.1f | %.1f | %.1f | %.2f | %.2f | %d |" % (c, s, med(s, c, "output_tok_s"),
              med(s, c, "ttft_p50_ms"), med(s, c, "ttft_p99_ms"), med(s, c, "itl_p50_ms"), med(s, c, "itl_p99_ms"),
              sum(r["errors"] for r in rows if r["server"] == s and r["clients"] == c)))
print()
for r in rows:
    if r.get("first_error"):
        print("error (%s, %d clients): %s" % (r["server"], r["clients"], r["first_error"]))
for c in levels:
    print("%d clients: loom / llama-server output tok/s = %.2fx; ITL p99 loom %.2f ms vs %.2f ms" % (
        c, med("loom", c, "output_tok_s") / med("llama-server", c, "output_tok_s"),
        med("loom", c, "itl_p99_ms"), med("llama-server", c, "itl_p99_ms")))
PY
