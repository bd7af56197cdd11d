#!/usr/bin/env bash
# --dump DIR fails loudly (status 1, one line naming the path) when DIR cannot
# be a dump folder or a write into it fails, instead of running on and
# writing nothing.
source "$(dirname "$0")/lib.sh" "$@"
require_shared
M="$S260/stories260K.bin"; Z="$S260/tok512.bin"
run_dump() { "$LOOM" run -m "$M" -z "$Z" --temp 0 -n 2 -p "Hi" "$@"; }

echo "not a folder" >"$TMP/file"
expect_error "--dump DIR: an existing regular file" "--dump: '$TMP/file' exists and is not a directory" \
    run_dump --dump "$TMP/file"
expect_error "--dump DIR: its parent is missing" "--dump: cannot create directory '$TMP/none/dump'" \
    run_dump --dump "$TMP/none/dump"
if [ "$(id -u)" -ne 0 ]; then  # root may write into a read-only folder
    mkdir "$TMP/ro" && chmod 555 "$TMP/ro"
    expect_error "--dump DIR: a read-only folder" "--dump: cannot write into directory '$TMP/ro'" \
        run_dump --dump "$TMP/ro"
fi

# A write that fails: a file size limit of 1 KiB makes writes beyond it fail
# with EFBIG (SIGXFSZ ignored), even as root, as a full disk would. Several
# runs on 2 threads: the failure of thread 0's dump must stop the others at the
# same barrier (a run used to hang there). timeout turns a hang into a failure.
limited() { (trap '' XFSZ; ulimit -f 1; exec timeout 60 "$@"); }
for i in 1 2 3 4 5; do
    rm -rf "$TMP/small"
    expect_error "--dump: a write fails (file size limit), run $i" \
        "forward pass failed: dump \(node [0-9]+ .*\): --dump: cannot write '$TMP/small/[^']+'" \
        limited "$LOOM" run -m "$M" -z "$Z" --temp 0 -n 2 -p "Hi" -t 2 --dump "$TMP/small"
done
[ -f "$TMP/small/index.tsv" ] && pass "the dump wrote what it could before the failure" \
    || fail "no index.tsv in $TMP/small"
finish
