#!/usr/bin/env bash
# loom tokenize on the GGUF vocabularies of ../shared/vocab: each kind, BOS/EOS
# from the vocabulary, --no-bos/--no-eos/--parse-special, and clean errors.
source "$(dirname "$0")/lib.sh" "$@"
V="$SHARED/vocab"
if [ ! -f "$V/ggml-vocab-gpt-2.gguf" ]; then
    if [ -n "${CI:-}" ]; then echo "FAIL: vocabularies missing under $V (CI must have ../shared)" >&2; exit 1; fi
    echo "SKIP: vocabularies missing under $V" >&2
    exit 77
fi
expect_ids() {  # NAME EXPECTED ARGS...
    local name="$1" want="$2"; shift 2
    local got; got=$("$LOOM" tokenize "$@" 2>"$TMP/err")
    [ "$got" = "$want" ] && pass "$name" || fail "$name: got '$got', want '$want' ($(cat "$TMP/err"))"
}
expect_ids "llama spm: BOS + ids" "1 15043 3186" -z "$V/ggml-vocab-llama-spm.gguf" -p "Hello world"
expect_ids "llama spm --no-bos" "15043 3186" -z "$V/ggml-vocab-llama-spm.gguf" -p "Hello world" --no-bos
expect_ids "phi-3 --parse-special" "1 32010 15043" -z "$V/ggml-vocab-phi-3.gguf" -p "<|user|>Hello" --parse-special
expect_ids "gpt-2: no BOS" "15496 995" -z "$V/ggml-vocab-gpt-2.gguf" -p "Hello world"
expect_ids "gpt-2 bytes" "12520 99 247" -z "$V/ggml-vocab-gpt-2.gguf" -p " 🦙"
expect_ids "bert: [CLS] ... [SEP]" "101 7592 2088 102" -z "$V/ggml-vocab-bert-bge.gguf" -p "Hello World"
expect_ids "bert --no-bos --no-eos" "7592 2088" -z "$V/ggml-vocab-bert-bge.gguf" -p "Hello World" --no-bos --no-eos
expect_ids "empty text" "1" -z "$V/ggml-vocab-llama-spm.gguf" -p ""

expect_error "invalid UTF-8" "not valid UTF-8 at byte offset 4" \
    "$LOOM" tokenize -z "$V/ggml-vocab-gpt-2.gguf" -p $'bad \xff'
head -c 5000 "$V/ggml-vocab-gpt-2.gguf" >"$TMP/trunc.gguf"
expect_error "truncated GGUF" "trunc.gguf.*(truncated|bytes left)" "$LOOM" tokenize -z "$TMP/trunc.gguf" -p "x"
printf 'GGUF\003\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' >"$TMP/novocab.gguf"
expect_error "GGUF without vocabulary" "tokenizer.ggml.model" "$LOOM" tokenize -z "$TMP/novocab.gguf" -p "x"
finish
