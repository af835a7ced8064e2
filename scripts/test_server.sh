#!/usr/bin/env bash
# Builds llm-server and llm-run and runs the server suite (tests/server): the official openai
# Python client against llm-server on loopback, with the shipped models. The client and pytest
# are pinned in tests/server/requirements.txt and installed into a virtual environment in the
# build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${LLMRT_BUILD_DIR:-build}
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMRT_TESTS=ON -DLLMRT_WERROR=$werror >/dev/null
cmake --build "$build" -j"$(nproc)" --target llm-server llm-run
venv="$build/server-venv"
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian's own python3 keeps venv (ensurepip) in a separate package.
    rm -rf "$venv"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv
    python3 -m venv "$venv"
  fi
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r tests/server/requirements.txt
LLMRT_BUILD_DIR="$(cd "$build" && pwd)" "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/server
