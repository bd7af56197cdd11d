#!/usr/bin/env bash
# loom chat with the Llama 2 [INST] template on a SentencePiece GGUF (stories260K
# converted with its tokenizer by loom convert; the file has no chat template,
# so the SentencePiece vocabulary selects llama2): scripted turns, and the first
# reply equals what loom run generates for the same rendered prompt.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
G="$TMP/s260.gguf"
"$LOOM" convert "$S260/stories260K.bin" "$G" -z "$S260/tok512.bin" >/dev/null 2>"$TMP/err" \
    || { fail "convert: $(cat "$TMP/err")"; finish; }

printf 'Once upon a time\nTell me more\n' | "$LOOM" chat -m "$G" --temp 0 -n 8 -v >"$TMP/out" 2>"$TMP/err"
rc=$?
turns=$(grep -c "^\[prompt" "$TMP/err")
if [ $rc -eq 0 ] && [ "$turns" -eq 2 ] && grep -q "context [0-9]*/512" "$TMP/err"; then
    pass "chat llama2: two scripted turns"
else
    fail "chat llama2: rc $rc, $turns turns: $(cat "$TMP/err")"
fi
# turn 1 is BOS + "[INST] Once upon a time [/INST]": loom run adds BOS itself
printf 'Once upon a time\n' | "$LOOM" chat -m "$G" --temp 0 -n 8 >"$TMP/reply" 2>/dev/null
reply=$(cat "$TMP/reply")
ran=$("$LOOM" run -m "$G" -p "[INST] Once upon a time [/INST]" --temp 0 -n 8 2>/dev/null)
if [ -n "$reply" ] && [[ "$ran" == *"$reply" ]]; then
    pass "chat llama2: first reply = loom run on the rendered prompt"
else
    fail "chat llama2: reply '$reply', run '$ran'"
fi
# the template can be forced; an empty line is skipped
printf '\nHi\n' | "$LOOM" chat -m "$G" --chat-template chatml --temp 0 -n 4 -v >"$TMP/out" 2>"$TMP/err"
[ $? -eq 0 ] && [ "$(grep -c "^\[prompt" "$TMP/err")" -eq 1 ] && pass "chat: --chat-template chatml" \
    || fail "chat --chat-template chatml: $(cat "$TMP/err")"
finish
