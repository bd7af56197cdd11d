#!/usr/bin/env bash
# A file that is neither GGUF nor a llama2.c checkpoint is named as such (it
# was read as llama2.c and reported as "impossible dim = 1869357091"), with
# what it seems to be; a damaged checkpoint keeps its own message.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
Z="$S260/tok512.bin"
NOT='neither a GGUF file \(no "GGUF" magic\) nor a llama2.c checkpoint \(its header says: impossible'
run() { "$LOOM" run -m "$1" -z "$Z" -n 1; }

printf 'Once upon a time there was a text file.\n' >"$TMP/story.txt"
expect_error "a text file" "story.txt: $NOT dim = [0-9]+ .*\); it starts with text: \"Once upon a time there w\"" run "$TMP/story.txt"
printf 'PK\003\004%040d' 0 >"$TMP/model.pt"
expect_error "a zip (PyTorch) file" "model.pt: $NOT .*it is a zip archive" run "$TMP/model.pt"
head -c 4096 "$LOOM" >"$TMP/elf"
expect_error "an executable" "elf: $NOT .*it is an executable \(ELF\)" run "$TMP/elf"
printf 'tjgg\001\000\000\000%040d' 0 >"$TMP/old.bin"
expect_error "a GGJT file" "old.bin: $NOT .*GGML/GGMF/GGJT file.*convert it to GGUF" run "$TMP/old.bin"
python3 - "$TMP/weights.bin" <<'PY'
import struct, sys
h = b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + b'\0' * 4)
PY
expect_error "safetensors without its suffix" "weights.bin: $NOT .*looks like safetensors" run "$TMP/weights.bin"
"$LOOM" convert "$S260/stories260K.bin" "$TMP/s.gguf" -z "$Z" >/dev/null 2>&1
printf 'GGUX' | dd of="$TMP/s.gguf" bs=1 conv=notrunc 2>/dev/null
expect_error "a GGUF with a damaged magic" "s.gguf: $NOT" run "$TMP/s.gguf"
# a checkpoint with a plausible header stays a (truncated) checkpoint
head -c 100000 "$S260/stories260K.bin" >"$TMP/trunc.bin"
"$LOOM" run -m "$TMP/trunc.bin" -z "$Z" >/dev/null 2>"$TMP/err"
grep -q "truncated" "$TMP/err" && ! grep -q "neither" "$TMP/err" && pass "a truncated checkpoint is still one" \
    || fail "truncated: $(cat "$TMP/err")"
finish
