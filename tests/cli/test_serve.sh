#!/usr/bin/env bash
# loom serve end to end with the official openai client (tests/serve/serve_test.py
# api): every endpoint, plain and streamed chat, completions against loom run,
# embeddings against loom embed, each error class, /metrics, SIGTERM.
source "$(dirname "$0")/serve_lib.sh" "$@"
run_serve_test api
