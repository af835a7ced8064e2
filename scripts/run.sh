#!/usr/bin/env bash
# Builds llmrt and runs llm-run on the checkpoint the repository carries (the README's main-job
# command). Extra arguments are passed to llm-run and replace the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${LLMRT_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target llm-run
if (($# == 0)); then
  set -- --model models/kimi-k2-kjv-tiny --prompt "In the beginning" --max-tokens 60
fi
exec "$build/samples/llm-run" "$@"
