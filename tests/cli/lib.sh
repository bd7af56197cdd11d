# Shared helpers for the CLI tests. Usage in a test: source lib.sh "$@".
#   $1 = path to the loom binary, $2 = the shared data folder
set -u
LOOM="$1"
SHARED="${LOOM_SHARED_DIR:-$2}"
MODELS="$SHARED/models"
S260="$MODELS/stories260K"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
FAILS=0
PASSES=0

# The shared models are data, not part of the repository: skip visibly where
# they are absent, but fail in CI, where their absence is a broken setup.
require_shared() {
    if [ ! -f "$S260/stories260K.bin" ] || [ ! -f "$S260/tok512.bin" ]; then
        if [ -n "${CI:-}" ]; then
            echo "FAIL: shared models missing under $MODELS (CI must have ../shared)" >&2
            exit 1
        fi
        echo "SKIP: shared models missing under $MODELS" >&2
        exit 77
    fi
}

pass() { PASSES=$((PASSES + 1)); echo "ok   $1"; }
fail() { FAILS=$((FAILS + 1)); echo "FAIL $1" >&2; }

# expect_error NAME PATTERN CMD...: CMD must exit 1 (an error, not a signal or
# success) and print exactly one stderr line matching PATTERN.
expect_error() {
    local name="$1" pattern="$2"; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    local lines; lines=$(wc -l <"$TMP/err")
    if [ "$rc" -ne 1 ]; then
        fail "$name: exit status $rc, expected 1 ($(head -c 300 "$TMP/err"))"
    elif [ "$lines" -ne 1 ]; then
        fail "$name: expected one line on stderr, got $lines: $(head -c 300 "$TMP/err")"
    elif ! grep -qiE -e "$pattern" "$TMP/err"; then
        fail "$name: stderr does not match /$pattern/: $(cat "$TMP/err")"
    else
        pass "$name"
    fi
}

finish() {
    echo "$PASSES passed, $FAILS failed"
    [ "$FAILS" -eq 0 ] && [ "$PASSES" -gt 0 ]
    exit $?
}
