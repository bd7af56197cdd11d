#!/usr/bin/env bash
# loom tune: the first run times every family and writes the wisdom file, the
# second only reads it; LOOM_VARIANTS and --force are obeyed and never timed
# over; a corrupt file is reported and rewritten; off writes nothing; bad
# lists are errors. (CTest runs the other tests with LOOM_WISDOM=off.)
source "$(dirname "$0")/lib.sh" "$@"
if ! grep -q avx512f /proc/cpuinfo || { [ -n "${LOOM_ISA:-}" ] && [ "$LOOM_ISA" != avx512 ]; }; then
    echo "SKIP: below AVX-512 (the CPU's, or LOOM_ISA=${LOOM_ISA:-}) no kernel family has a choice" >&2
    exit 77
fi
W="$TMP/w/wisdom.json"
families="gemm.bf16 gemv.q4_full attention.bf16 attention.i8"
out=$(LOOM_WISDOM="$W" "$LOOM" tune 2>"$TMP/err")
rc=$?
ok=1
for f in $families; do echo "$out" | grep -Eq "^\| $f \| .* \| measured \|" || ok=0; done
[ $rc -eq 0 ] && [ $ok -eq 1 ] && grep -q '"format":.*"loom-wisdom 1"' "$W" \
    && pass "first run: every family measured, the file written" || fail "first run ($rc): $out $(cat "$TMP/err")"
secs=$(echo "$out" | sed -n 's/^timing in this process: \([0-9.]*\) s$/\1/p')
# (the 2 s budget is for optimised builds: a sanitizer build's kernels run several times slower)
if grep -q __asan_init "$LOOM" 2>/dev/null; then
    awk -v s="$secs" 'BEGIN { exit !(s > 0) }' && pass "timing took ${secs} s (sanitizer build: no budget)" \
        || fail "timing took '$secs' s"
else
    awk -v s="$secs" 'BEGIN { exit !(s > 0 && s < 2) }' && pass "timing took ${secs} s (< 2 s)" || fail "timing took '$secs' s"
fi
out=$(LOOM_WISDOM="$W" "$LOOM" tune 2>&1)
ok=1
for f in $families; do echo "$out" | grep -Eq "^\| $f \| .* \| wisdom \|" || ok=0; done
[ $ok -eq 1 ] && echo "$out" | grep -q "^timing in this process: 0.000 s$" \
    && pass "second run: read from the file, nothing timed" || fail "second run: $out"
out=$(LOOM_WISDOM="$W" LOOM_VARIANTS=gemm.bf16=widen "$LOOM" tune 2>&1)
echo "$out" | grep -Eq "^\| gemm.bf16 \| .* \| widen \| forced \|" && pass "LOOM_VARIANTS forces a variant" \
    || fail "LOOM_VARIANTS: $out"
out=$(LOOM_WISDOM="$W" "$LOOM" tune --force attention.i8=widen 2>&1)
echo "$out" | grep -Eq "^\| attention.i8 \| .* \| widen \| forced \|" && pass "--force" || fail "--force: $out"
echo '{"format": "loom-wisdom 1", "families": {' >"$W"
out=$(LOOM_WISDOM="$W" "$LOOM" tune 2>"$TMP/err")
grep -q "ignored" "$TMP/err" && echo "$out" | grep -Eq "^\| gemm.bf16 \| .* \| measured \|" \
    && grep -q '"gemm.bf16"' "$W" && pass "a corrupt file: reported, measured again, rewritten" \
    || fail "corrupt file: $out $(cat "$TMP/err")"
mkdir -p "$TMP/home"
out=$(HOME="$TMP/home" XDG_CACHE_HOME= LOOM_WISDOM=off "$LOOM" tune 2>&1)
[ -z "$(ls -A "$TMP/home")" ] && echo "$out" | grep -q "^wisdom: off" && pass "off: nothing written" \
    || fail "off: $out; $(ls -R "$TMP/home")"
out=$(HOME="$TMP/home" XDG_CACHE_HOME= LOOM_WISDOM= "$LOOM" tune 2>&1)
ls "$TMP/home/.cache/loom/"wisdom-*.json >/dev/null 2>&1 && pass "default file under ~/.cache/loom" \
    || fail "default file: $out"
expect_error "tune: --force unknown family" "unknown family 'gemm'" "$LOOM" tune --force gemm=widen
expect_error "tune: --force unknown variant" "no variant 'turbo'" "$LOOM" tune --force gemm.bf16=turbo
LOOM_VARIANTS=nope=1 LOOM_WISDOM=off "$LOOM" tune >/dev/null 2>"$TMP/err"
grep -q "LOOM_VARIANTS ignored.*unknown family 'nope'" "$TMP/err" && pass "a bad LOOM_VARIANTS is reported" \
    || fail "bad LOOM_VARIANTS: $(cat "$TMP/err")"
finish
