#!/usr/bin/env bash
# loom serve under load (tests/serve/serve_test.py load): 32 concurrent clients
# with seeded sampling get what each gets alone (--batch-invariant); a client
# that disconnects mid-stream frees its KV blocks; the queue limit answers 429
# and the server stays healthy; the timeout; SIGTERM drains, or cancels past
# its grace period, and exits 0.
source "$(dirname "$0")/serve_lib.sh" "$@"
run_serve_test load
