#!/usr/bin/env bash
# Installs what loom needs on a fresh Debian machine and builds it into build/.
#   LOOM_WERROR=ON   treat warnings as errors (CI does)
#   CC=clang         build with clang instead of gcc
#   LOOM_FETCH_MODELS=0  do not download the default models
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in build-essential cmake ninja-build pkg-config python3 libcjson-dev libyaml-dev; do
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

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR="${LOOM_WERROR:-OFF}"
cmake --build build
echo "setup: built build/loom"

# Default models (SmolLM2-135M-Instruct GGUF, all-MiniLM-L6-v2) into
# ${LOOM_MODELS_DIR:-~/.cache/loom/models}; LOOM_FETCH_MODELS=0 skips this.
if [ "${LOOM_FETCH_MODELS:-1}" != 0 ]; then
    scripts/fetch-models.sh
fi
