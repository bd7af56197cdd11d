#!/usr/bin/env bash
# Command-line conventions shared by every subcommand: --version, loom help CMD,
# --opt=value as well as --opt value.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"

# --version: CMake's project version, from loom and from every subcommand
want=$(sed -n 's/^project(loom VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
out=$("$LOOM" --version); rc=$?
[ $rc -eq 0 ] && [ -n "$want" ] && [ "$out" = "loom $want" ] && pass "--version: loom $want" \
    || fail "--version: rc $rc, '$out', CMakeLists.txt says '$want'"
for cmd in run chat bench tokenize profile plan embed convert; do
    out=$("$LOOM" $cmd --version 2>&1); rc=$?
    [ $rc -eq 0 ] && [ "$out" = "loom $want" ] && pass "$cmd --version" || fail "$cmd --version: rc $rc, '$out'"
    # loom help CMD is loom CMD --help
    "$LOOM" help $cmd >"$TMP/h1" 2>&1; rc1=$?
    "$LOOM" $cmd --help >"$TMP/h2" 2>&1; rc2=$?
    if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && cmp -s "$TMP/h1" "$TMP/h2" && grep -q "usage: loom $cmd" "$TMP/h1" \
        && grep -q -- "--version" "$TMP/h1"; then
        pass "help $cmd = $cmd --help"
    else
        fail "help $cmd: rc $rc1/$rc2: $(head -c 200 "$TMP/h1")"
    fi
done
"$LOOM" help >"$TMP/out" 2>&1 && grep -q "loom help COMMAND" "$TMP/out" && pass "help alone lists the commands" \
    || fail "help: $(cat "$TMP/out")"
"$LOOM" help frobnicate >"$TMP/out" 2>"$TMP/err"; rc=$?
[ $rc -eq 2 ] && grep -q "unknown command 'frobnicate'" "$TMP/err" && pass "help of an unknown command" \
    || fail "help frobnicate: rc $rc $(cat "$TMP/err")"

# --opt=value means --opt value
a=$("$LOOM" run -m "$M" -z "$Z" -p "Once upon" -n 12 --temp 0.8 --seed 7 2>/dev/null)
b=$("$LOOM" run --model="$M" --tokenizer="$Z" --prompt="Once upon" --n-predict=12 --temp=0.8 --seed=7 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "run: --opt=value gives the same text" || fail "run --opt=value: '$a' vs '$b'"
a=$("$LOOM" tokenize -z "$Z" -p "a=b =c")
b=$("$LOOM" tokenize -z "$Z" --prompt="a=b =c")
[ -n "$a" ] && [ "$a" = "$b" ] && pass "a value may contain '='" || fail "value with '=': '$a' vs '$b'"
a=$("$LOOM" tokenize -z "$Z" --prompt= --no-bos)
[ -z "$a" ] && pass "--prompt= is an empty value" || fail "--prompt=: '$a'"
b=$("$LOOM" bench -m "$M" -p 4 -n 0 -r 1 --json 2>/dev/null | python3 -c "import json,sys; print(len(json.load(sys.stdin)))")
[ "$b" = 1 ] && pass "bench: --json flag" || fail "bench --json: '$b'"

# usage errors (exit 2, one line naming the option)
usage_error() {  # NAME PATTERN CMD...
    local name="$1" pattern="$2"; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -qE -e "$pattern" "$TMP/err"; then
        pass "$name"
    else
        fail "$name: rc $rc: $(cat "$TMP/err")"
    fi
}
usage_error "--temp= (empty number)" "'--temp' expects a number, got ''" "$LOOM" run -m "$M" -z "$Z" --temp=
usage_error "--seed=-1" "'--seed' expects a non-negative integer" "$LOOM" run -m "$M" -z "$Z" --seed=-1
usage_error "flag with a value" "'--pieces' takes no value" "$LOOM" tokenize -z "$Z" -p x --pieces=yes
usage_error "unknown --name=value" "unknown option '--bogus'" "$LOOM" run -m "$M" -z "$Z" --bogus=3
usage_error "short option with =" "unknown option '-n=5'" "$LOOM" run -m "$M" -z "$Z" -n=5
finish
