#!/usr/bin/env bash
# Builds with AddressSanitizer + UBSan and runs the suites that feed llmrt hostile input (the
# hostile-input suite, the fuzz smoke run, the pure C ABI test) and the backend conformance suite. Allocations above 2 GiB are
# reported as errors (max_allocation_size_mb), so an input that makes llmrt allocate without
# bound fails the run even where it would fit in memory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${LLMRT_ASAN_BUILD_DIR:-build-asan}
# -O0 and line tables only keep the instrumented build short (UBSan's checks double the
# optimizer's work: -O1 took twice as long); the CPU kernels keep -O1 (CMakeLists.txt). The
# Highway targets are AVX-512, AVX2 and the portable one, so the conformance suite checks a
# 512-bit, a 256-bit and a scalar width under the sanitizers; the 128-bit SSE4 and SSSE3 copies
# (HWY_DISABLED_TARGETS=6144) are left out: the same templates at another width, and a third
# of the instrumented kernels' compile time (matmul.cc alone 113 -> 81 s). scripts/test.sh
# builds and tests every target.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMRT_TESTS=ON -DLLMRT_MPI=OFF -DLLMRT_SAMPLES=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DHWY_DISABLED_TARGETS=6144" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O0 -g1" \
  -DLLMRT_SANITIZE=address,undefined >/dev/null
cmake --build "$build" -j"$(nproc)" --target llmrt_hostile_tests llmrt_fuzz_smoke llmrt_abi_test llmrt_abi_ffi_test llmrt_backend_tests
ASAN_OPTIONS="detect_leaks=1:max_allocation_size_mb=2048:abort_on_error=1" \
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -L 'hostile|fuzz|abi|backend' -E 'abi_exports|abi_manifest'
