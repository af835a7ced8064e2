#!/usr/bin/env bash
# Builds with ThreadSanitizer and runs the suites that drive several threads (stress: concurrent
# session changes during steps; golden and abi: the thread pool under every forward pass). Left
# out, to keep CI within its time: the two held-out accuracy tests (they score long texts through
# the same passes the other golden tests run, about 100 s each under TSan), the layout tests
# (checkpoint loading and conversion, one thread) and the F32-KV transformers comparison (the
# passes of the batch-composition test, which runs with several threads and batch shapes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${LLMRT_TSAN_BUILD_DIR:-build-tsan}
# The suites run the best SIMD target of the machine only: the 128-bit SSE4 and SSSE3 copies of
# the kernels (for CPUs without AVX2) are not compiled here.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMRT_TESTS=ON -DLLMRT_MPI=OFF -DLLMRT_SANITIZE=thread \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DHWY_DISABLED_TARGETS=6144" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" >/dev/null
cmake --build "$build" -j"$(nproc)" --target llmrt_stress_tests llmrt_golden_tests llmrt_abi_test llmrt_abi_ffi_test
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -L 'stress|golden|abi' \
  -E 'abi_exports|abi_manifest|HeldOutAccuracy|LayoutTest\.|BatchedF32KvMatchesTransformers'
