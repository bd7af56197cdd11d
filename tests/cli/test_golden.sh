#!/usr/bin/env bash
# Greedy generation must print exactly what llama2.c's run.c prints.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
golden="$S260/golden_greedy_256.txt"
for model in stories260K.bin stories260K.v1.bin; do
    for t in 1 2; do
        name="golden $model -t $t"
        if ! "$LOOM" run -m "$S260/$model" -z "$S260/tok512.bin" --temp 0 -n 256 -t "$t" \
            >"$TMP/out" 2>"$TMP/err"; then
            fail "$name: $(cat "$TMP/err")"; continue
        fi
        # trailing whitespace aside
        if diff <(sed -e 's/[[:space:]]*$//' "$golden") <(sed -e 's/[[:space:]]*$//' "$TMP/out") >"$TMP/diff"; then
            pass "$name"
        else
            fail "$name: output differs from $golden:"; head -20 "$TMP/diff" >&2
        fi
    done
done
# With a prompt: the text llama2.c's run.c prints for the same prompt and
# steps (tests/golden/README.md says how these files were made).
here="$(dirname "$0")/../golden"
for f in "$here"/stories260K_prompt_*.txt; do
    [ -f "$f" ] || continue
    prompt=$(sed -n '1p' "$f"); n=$(sed -n '2p' "$f")
    tail -n +3 "$f" >"$TMP/expect"
    name="prompt '$prompt' -n $n"
    if "$LOOM" run -m "$S260/stories260K.bin" -z "$S260/tok512.bin" --temp 0 -n "$n" -p "$prompt" \
        >"$TMP/out" 2>"$TMP/err" &&
        diff <(sed -e 's/[[:space:]]*$//' "$TMP/expect") <(sed -e 's/[[:space:]]*$//' "$TMP/out") >"$TMP/diff"; then
        pass "$name"
    else
        fail "$name: $(cat "$TMP/err")"; head -20 "$TMP/diff" >&2
    fi
done
finish
