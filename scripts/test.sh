#!/usr/bin/env bash
# Builds llmrt with tests and runs the whole suite. This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${LLMRT_BUILD_DIR:-build}
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
# -g1 (line tables: backtraces, perf and sanitizer reports still name lines) instead of -g builds
# about 30% faster; configure a build of your own with -g for a debugger's full view.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMRT_TESTS=ON -DLLMRT_WERROR=$werror \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -LE gpu
