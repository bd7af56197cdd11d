# Shared by the loom serve tests: the default models and the test venv.
# The venv (.venv in the repository, with the openai package) is made by
# scripts/setup.sh: skip visibly without it, but fail in CI, where its absence
# is a broken setup; the same for the default models.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$ROOT/.venv/bin/python"
MDIR="${LOOM_MODELS_DIR:-$HOME/.cache/loom/models}"
skip_or_fail() {
    if [ -n "${CI:-}" ]; then echo "FAIL: $1 (CI must have it: scripts/setup.sh)" >&2; exit 1; fi
    echo "SKIP: $1 (run scripts/setup.sh)" >&2
    exit 77
}
run_serve_test() {
    [ -x "$PY" ] && "$PY" -c "import openai" 2>/dev/null || skip_or_fail "no $ROOT/.venv with the openai package"
    [ -f "$MDIR/SmolLM2-135M-Instruct.Q4_1.gguf" ] && [ -d "$MDIR/all-MiniLM-L6-v2" ] \
        || skip_or_fail "the default models are not in $MDIR"
    # a sanitizer build runs ~10x slower: the test shortens its generations
    if ldd "$LOOM" 2>/dev/null | grep -q -E 'lib(asan|ubsan)' || nm "$LOOM" 2>/dev/null | grep -q __asan_init; then
        export LOOM_SERVE_TEST_SLOW=1
    fi
    "$PY" "$ROOT/tests/serve/serve_test.py" "$1" "$LOOM" "$MDIR"
}
