#!/usr/bin/env bash
# Installs what loom needs on a fresh Debian machine and builds it into build/.
#   LOOM_WERROR=ON   treat warnings as errors (CI does)
#   CC=clang         build with clang instead of gcc
#   LOOM_FETCH_MODELS=0  do not download the default models
#   LOOM_TEST_VENV=0     do not make .venv (the openai client of loom serve's tests)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in build-essential cmake ninja-build pkg-config python3 python3-venv libcjson-dev libyaml-dev \
           libmicrohttpd-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
command -v clang >/dev/null 2>&1 || need+=(clang)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)  # scripts/fetch-models.sh
if [ "${#need[@]}" -gt 0 ]; then
    echo "setup: installing ${need[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi

# The tests of loom serve talk to it with the official openai client: a
# test-only dependency, in a virtual environment of the repository (.venv,
# git-ignored), never in the system's Python.
if [ "${LOOM_TEST_VENV:-1}" != 0 ]; then
    if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import openai" >/dev/null 2>&1; then
        echo "setup: making .venv with the openai package (loom serve's tests)"
        python3 -m venv .venv
        .venv/bin/python -m pip install --quiet --disable-pip-version-check openai
    fi
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR="${LOOM_WERROR:-OFF}"
cmake --build build
echo "setup: built build/loom"

# Default models (SmolLM2-135M-Instruct GGUF, all-MiniLM-L6-v2) into
# ${LOOM_MODELS_DIR:-~/.cache/loom/models}; LOOM_FETCH_MODELS=0 skips this.
if [ "${LOOM_FETCH_MODELS:-1}" != 0 ]; then
    scripts/fetch-models.sh
fi
