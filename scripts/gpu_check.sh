#!/usr/bin/env bash
# The prepared device check, run on the GPU machine in at most 8 minutes: uses the binaries
# scripts/gpu_prepare.sh --prebuild packed (or builds llmrt with the CUDA backend against the
# folder scripts/gpu_prepare.sh gathered, never the machine's /usr), then runs the `gpu`
# conformance tests, the golden tests on the CUDA backend, the CUDA microbenchmark, llm-bench on
# synthetic weights at Kimi K2's layer shapes, compute-sanitizer (memcheck) on the conformance
# suite, and the technique tables (weights, KV codecs, GLM shapes, integrity). Logs and a summary
# go to $OUT.
#
#   bash scripts/gpu_check.sh            (OUT must name an output folder)
#   LLMRT_GPU_CHECK_BUILD_ONLY=1 ...     configure and build only, then check that no header or
#                                        library came from /usr (the dry run on a development
#                                        machine, where /usr does hold the packages)
#   LLMRT_GPU_CHECK_BUILD_ONLY=full ...  the same for every target the device run needs (what
#                                        gpu_prepare.sh --prebuild packs)
#   LLMRT_GPU_CHECK_STEPS="bench tables" ...  only the steps named (spaces or commas) after the
#                                        setup (unpack, configure, build, origins, device), in the
#                                        script's order: gpu_tests golden bench synthetic_bench
#                                        sanitizer accuracy profile tables breakdown; the others
#                                        are listed as not selected (for a short device session
#                                        that must choose, or a second call for what the first
#                                        had no time for)
#
# The device run carries what gpu_prepare.sh made: carry [".gpu-carry"] (packed) or [".gpu-deps"].
#
# Steps log into four files (the device tool returns at most eight): $OUT/setup.log (unpack,
# configure, build, origins, device), tests.log (gpu_tests, golden), bench.log (bench,
# synthetic_bench, tables), sanitizer.log, each step's part headed by its name and cut to its
# last 3 MiB; $OUT/summary.txt has one line per step: name, exit status, seconds. The script
# exits 0 only when every step passed. A test step that skips for want of a device, finds no
# tests, or falls back to the CPU fails (a run with an invisible device must not pass).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder for logs and the summary}"
mkdir -p "$OUT"
root=$PWD
deps=$root/${LLMRT_GPU_DEPS:-.gpu-deps}
build=$root/${LLMRT_GPU_BUILD_DIR:-build-gpu}
jobs=$(nproc)
summary=$OUT/summary.txt
: > "$summary"
for f in setup tests bench sanitizer; do : > "$OUT/$f.log"; done
failed=0

# The whole check ends within 8 minutes: every step's limit is cut to the time left.
budget=${LLMRT_GPU_CHECK_SECONDS:-470}
[ -n "${LLMRT_GPU_CHECK_BUILD_ONLY:-}" ] && budget=${LLMRT_GPU_CHECK_SECONDS:-9000}  # two shared cores
deadline=$((SECONDS + budget))

# The log file of each step.
log_of() {
  case "$1" in
    unpack | configure | build | origins | device) echo setup ;;
    gpu_tests | golden) echo tests ;;
    bench | synthetic_bench | tables) echo bench ;;
    profile | breakdown) echo sanitizer ;;
    accuracy) echo tests ;;
    *) echo "$1" ;;
  esac
}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Whether step NAME runs: every setup step, and the others where LLMRT_GPU_CHECK_STEPS is unset
# or names them.
selected() {
  case "$1" in
    unpack | configure | build | origins | device) return 0 ;;
  esac
  [ -z "${LLMRT_GPU_CHECK_STEPS:-}" ] && return 0
  case " ${LLMRT_GPU_CHECK_STEPS//,/ } " in
    *" $1 "*) return 0 ;;
  esac
  return 1
}
# An unknown name in LLMRT_GPU_CHECK_STEPS is a mistake, not a quiet no-op.
for s in ${LLMRT_GPU_CHECK_STEPS//,/ }; do
  case "$s" in
    gpu_tests | golden | bench | synthetic_bench | sanitizer | accuracy | profile | tables | breakdown) ;;
    *) echo "LLMRT_GPU_CHECK_STEPS: unknown step $s" >&2; exit 2 ;;
  esac
done

# step NAME TIMEOUT_S COMMAND...: runs the command with a time limit, logging to its log file.
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  if ! selected "$name"; then
    echo "$name not selected" | tee -a "$summary"
    return 0
  fi
  if [ $((deadline - SECONDS)) -lt "$limit" ]; then limit=$((deadline - SECONDS)); fi
  if [ "$limit" -lt 5 ]; then
    echo "$name skipped: no time left" | tee -a "$summary"
    failed=1
    return 1
  fi
  # Through bash, so that the command may be one of the functions below (exported).
  timeout --kill-after=10 "$limit" bash -c '"$@"' _ "$@" > "$scratch/$name.full" 2>&1
  local rc=$?
  {
    echo "==== $name (rc=$rc, $((SECONDS - start))s)"
    tail -c 3145728 "$scratch/$name.full"
  } >> "$OUT/$(log_of "$name").log"
  rm -f "$scratch/$name.full"
  echo "$name rc=$rc $((SECONDS - start))s" | tee -a "$summary"
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}

# What scripts/gpu_prepare.sh packed for the trip (the folder below, carried instead of the
# unpacked one): the gathered packages, and with --prebuild the binaries built here.
carried=$root/.gpu-carry
if [ ! -d "$deps/usr" ] && [ -f "$carried/deps.tar.xz" ]; then
  tar -C "$root" -xJf "$carried/deps.tar.xz" || { echo "cannot unpack $carried/deps.tar.xz" | tee -a "$summary"; exit 1; }
fi
if [ ! -d "$deps/usr" ]; then
  echo "no $deps: run scripts/gpu_prepare.sh on a development machine first" | tee -a "$summary"
  exit 1
fi
libdir=$deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# pkg-config looks only in the gathered folder.
export PKG_CONFIG_LIBDIR=$libdir/pkgconfig:$deps/usr/share/pkgconfig
export PKG_CONFIG_PATH=
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
# librt (C library, not a gathered package) for cudart_static, as the compiler finds it.
rt=$(gcc -print-file-name=librt.so)
[ -f "$rt" ] || rt=$(gcc -print-file-name=librt.a)
cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
# NCCL: the toolkit's, else the system's (NVIDIA's packages: /usr/include, /usr/lib), else the
# pip wheel PyTorch brings (nvidia/nccl); the configure step is told where (its search is
# limited to the gathered folder and the toolkit), and the loader finds libnccl.so.2 there.
nccl_cmake=""  # (a string: configure runs in a child bash, which gets no arrays)
nccl_dir=""
if [ ! -f "$cuda_root/include/nccl.h" ]; then
  for d in /usr $(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null); do
    lib=$(ls "$d"/lib/x86_64-linux-gnu/libnccl.so* "$d"/lib/libnccl.so* 2>/dev/null | head -1)
    if [ -f "$d/include/nccl.h" ] && [ -n "$lib" ]; then
      nccl_cmake="-DLLMRT_NCCL_INCLUDE=$d/include -DLLMRT_NCCL_LIBRARY=$lib"
      nccl_dir=$(dirname "$lib")
      break
    fi
  done
fi
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl_dir
# compute-sanitizer and nvidia-smi, on the PATH or where the toolkit and the driver put them.
sanitizer=$(command -v compute-sanitizer || ls "$cuda_root"/bin/compute-sanitizer \
  "$cuda_root"/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
smi=$(command -v nvidia-smi || ls /usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi 2>/dev/null | head -1)

configure() {
  # Programs are named explicitly: the PATH is not searched (below).
  local gen=(-G "Unix Makefiles" -DCMAKE_MAKE_PROGRAM="$(command -v make)")
  command -v ninja > /dev/null && gen=(-G Ninja -DCMAKE_MAKE_PROGRAM="$(command -v ninja)")
  # Packages only from the gathered folder: the system prefixes and the PATH-derived ones are
  # off, so a package missing there fails here instead of resolving to /usr.
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMRT_TESTS=ON -DLLMRT_CUDA=ON \
    -DCMAKE_C_COMPILER="$(command -v gcc)" -DCMAKE_CXX_COMPILER="$(command -v g++)" \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$cuda_root" -DCUDAToolkit_rt_LIBRARY="$rt" \
    -DCMAKE_PREFIX_PATH="$deps/usr" -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF \
    -DCMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH=OFF -DPKG_CONFIG_EXECUTABLE="$deps/usr/bin/pkg-config" $nccl_cmake
}

# A test step's command, failing where the tests did not run on the device: a skip for want of
# a device (or of its backend), no test found, or a runtime that fell back to the CPU.
on_device() {
  local f rc
  f=$(mktemp)
  "$@" > "$f" 2>&1
  rc=$?
  cat "$f"
  # (Tests of the refusal of more device ranks than devices fall back on purpose: not counted.)
  if grep -iE 'no cuda device|no cuda (device|backend) here|cannot run here|using the CPU backend|No tests were found' "$f" |
    grep -qv 'runs one rank per cuda device'; then
    echo "gpu_check: tests skipped for want of the device, none found, or a CPU fallback (lines above)"
    [ "$rc" -eq 0 ] && rc=98
  fi
  rm -f "$f"
  return "$rc"
}

# Every package the build found resolves into the gathered folder; no compiled header came from
# /usr/include's copies of them.
check_origins() {
  local bad=0
  for v in absl_DIR GTest_DIR hwy_DIR nlohmann_json_DIR pkgcfg_lib_ONIG_onig PKG_CONFIG_EXECUTABLE; do
    local val
    val=$(grep -E "^$v(:[A-Z]+)?=" "$build/CMakeCache.txt" | head -1 | cut -d= -f2-)
    echo "$v=$val"
    case "$val" in "$deps"*) ;; *) echo "  not in $deps"; bad=1 ;; esac
  done
  local used
  used=$(find "$build" \( -name '*.d' -o -name 'compiler_depend.make' -o -name 'depend.make' \) -print0 |
         xargs -0 -r cat 2>/dev/null |
         grep -oE '(^| )/usr/include/(absl|hwy|gtest|gmock|nlohmann|oniguruma)[^ :]*' | sort -u | head -5)
  if [ -n "$used" ]; then
    echo "headers from /usr/include:"
    echo "$used"
    bad=1
  fi
  if [ -f "$build/build.ninja" ]; then
    used=$( (cd "$build" && ninja -t deps) | grep -E '^ +/usr/include/(absl|hwy|gtest|gmock|nlohmann|oniguruma)' |
           sort -u | head -5)
    if [ -n "$used" ]; then
      echo "headers from /usr/include:"
      echo "$used"
      bad=1
    fi
    echo "compiled headers checked: $( (cd "$build" && ninja -t deps) | grep -c "$deps/usr/include") from $deps"
  fi
  return $bad
}

# Prebuilt binaries (scripts/gpu_prepare.sh --prebuild): unpacked over $build, and used when
# they load here. Their build recorded absolute paths (test data, CTest files, the library's
# RUNPATH) under the development machine's checkout; where that path is free here it becomes a
# link to this checkout. A binary that does not load sends the check back to building here.
unpack_prebuilt() {
  tar -C "$root" -xJf "$carried/prebuilt.tar.xz" || return 1
  local src
  src=$(cat "$build/prebuilt_source") || return 1
  if [ "$src" != "$root" ] && [ "$(readlink -f "$src")" != "$root" ]; then
    [ -e "$src" ] && { echo "$src exists and is not this checkout"; return 1; }
    mkdir -p "$(dirname "$src")" && ln -s "$root" "$src" || return 1
    echo "linked $src -> $root"
  fi
  local b bad=0
  for b in "$build"/tests/llmrt_backend_tests "$build"/tests/llmrt_golden_tests \
    "$build"/tests/llmrt_cuda_microbench "$build"/samples/llm-bench "$build"/tests/llmrt_nccl_tests; do
    [ -f "$b" ] || continue
    if ldd "$b" | grep "not found"; then
      echo "$b does not load"
      bad=1
    fi
  done
  "$build/tests/llmrt_backend_tests" --gtest_list_tests > /dev/null || bad=1
  [ "$bad" -eq 0 ]
}

export root deps build jobs nvcc cuda_root rt nccl_cmake carried
export -f configure check_origins on_device unpack_prebuilt
targets=(llmrt llmrt_backend_tests llmrt_golden_tests llmrt_cuda_microbench llmrt_nccl_tests llm-bench llm-eval)
# cuBLASLt (dlopen'ed) from this machine's toolkit.
for d in "$cuda_root/lib64" "$cuda_root/targets/x86_64-linux/lib"; do
  [ -d "$d" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
prebuilt=0
if [ -z "${LLMRT_GPU_CHECK_BUILD_ONLY:-}" ] && [ -f "$carried/prebuilt.tar.xz" ]; then
  step unpack 60 unpack_prebuilt && prebuilt=1
  [ "$prebuilt" -eq 1 ] || { failed=0; echo "the prebuilt binaries do not run here: building" | tee -a "$summary"; }
fi
if [ "$prebuilt" -eq 0 ]; then
step configure 60 configure || { echo "configure failed" | tee -a "$summary"; exit 1; }
# The NCCL tests exist only where the toolkit ships NCCL (CMakeLists.txt says which at configure).
if ! grep -q "NCCL communicator: ON" "$OUT/setup.log"; then
  kept=()
  for t in "${targets[@]}"; do [ "$t" = llmrt_nccl_tests ] || kept+=("$t"); done
  targets=("${kept[@]}")
  echo "no NCCL in this toolkit: the NCCL tests are not built" | tee -a "$summary"
fi
if [ "${LLMRT_GPU_CHECK_BUILD_ONLY:-}" = full ]; then
  # Every target the device run needs (scripts/gpu_prepare.sh --prebuild packs them).
  step build 7200 cmake --build "$build" -j"$jobs" --target "${targets[@]}"
  step origins 60 check_origins
  exit $failed
elif [ -n "${LLMRT_GPU_CHECK_BUILD_ONLY:-}" ]; then
  # The dry run builds what exercises every gathered package, and little more (a development
  # machine has two cores): absl and nlohmann (util), Highway (the CPU backend), Oniguruma
  # (tokenizer), the CUDA code (the backend), and one GoogleTest source.
  dry_build() {
    cmake --build "$build" -j"$jobs" --target llmrt_layer_check_backend llmrt_tokenizer || return 1
    if [ -f "$build/build.ninja" ]; then
      (cd "$build" && ninja tests/CMakeFiles/llmrt_backend_tests.dir/backend/registry_test.cc.o)
    else
      make -C "$build/tests" backend/registry_test.cc.o
    fi
  }
  export -f dry_build
  step build 3000 dry_build
  step origins 60 check_origins
  exit $failed
fi
step build 240 cmake --build "$build" -j"$jobs" --target "${targets[@]}" || { cat "$summary"; exit 1; }
step origins 60 check_origins
fi
step device 30 "${smi:-nvidia-smi}"
# The conformance suite's device instances (ctest label gpu; -V, so that skip reasons show), the BF16
# activation policy's MatMul (Bf16MatMul.*/cuda: cuBLASLt), the FP8 policy's (Fp8Policy.*/cuda:
# cuBLASLt block-scaled FP8, the GEMV with activation scales, the tiled fallback), and the NCCL
# communicator and the CUDA backend's collectives over it (llmrt_nccl_tests). A hung test stops
# at 20 s and the others still run.
step gpu_tests 90 on_device ctest --test-dir "$build" -L gpu -V --timeout 20 --no-tests=error
# The golden tests on the CUDA backend: AUTO picks the device. The phase policies too: FP8 (or
# BF16) weights for prefill and INT4 for decode in one runtime, the role split (prefill runtime ->
# export -> decode runtime) against one runtime, and the FP8 KV phase policy. The quantized checkpoints, the
# FP8 KV codecs, the BF16 and FP8 activation policies and synthetic weights generated on the
# device are compared with the CPU engine (CudaMatchesCpuQuantized, CudaMatchesCpuFp8Kv,
# CudaBf16MatchesCpu, CudaFp8MatchesCpu, SyntheticCudaMatchesCpu; the warpgroup attention kernel
# on a synthetic model with Kimi K2's latent, SyntheticLatent512), decode passes replayed
# from CUDA graphs against direct ones (CudaGraphs), and device ranks refused clearly beyond the
# devices present (ParallelRuntime.DeviceRanks*);
# the transformers goldens of those checkpoints run on the CPU suite only, to keep this step short.
step golden 150 on_device env LLMRT_CONFORMANCE_VERBOSE=1 "$build/tests/llmrt_golden_tests" \
  --gtest_filter='BackendSelect.*:*CudaMatchesCpu*.*:SyntheticLatent512.*:*CudaBf16MatchesCpu*.*:*CudaFp8MatchesCpu*.*:*CudaGraphs.*:ParallelRuntime.DeviceRanks*:*GoldenTest.BatchedF32Kv*:*GoldenTest.BatchedBf16Kv*:*GoldenTest.Score*:*GoldenTest.BatchComposition*:WeightPolicy.*:KvExport.*:Fp8KvPhasePolicy.*-*GoldenTest*fp8*:*GoldenTest*int4*:*GoldenTest*Fp8*'
# (150 s: the MoE section, last, builds its 8.5 GB banks once per kernel setting, four of them.)
step bench 150 "$build/tests/llmrt_cuda_microbench"
# Synthetic weights at Kimi K2's real layer shapes, generated on the device (about 5.5 GB for
# two layers and 8 experts): the header line reports the time from creation to the first token.
# A failure is counted in the summary; nothing after it depends on it.
synthetic_bench() {
  local bench=$build/samples/llm-bench common=(--synthetic --preset k2-real --layers 2 --experts 8 --backend cuda)
  "$bench" "${common[@]}" --weights fp8 --sessions 1,16,64,256 --steps 4 --no-baselines || return 1
  "$bench" "${common[@]}" --weights bf16 --prefill-lens 512,4096 --repeats 2
}
export -f synthetic_bench
step synthetic_bench 75 synthetic_bench
step sanitizer 120 "${sanitizer:-compute-sanitizer}" --tool memcheck --error-exitcode 99 --print-limit 20 \
  "$build/tests/llmrt_backend_tests" --gtest_filter='*/cuda' --gtest_brief=1
# The tables of the seed's techniques at real layer shapes (synthetic weights, two layers and 8
# experts), under the activation policies a server runs (BF16 weights: BF16 activations; FP8:
# FP8; INT4: W4A16): weight formats (decode at 1, 64 and 256 sessions, prefill 4096; the routed
# experts on the tensor cores and, with LLMRT_CUDA_MOE=gemv, on the CUDA cores), KV codecs
# (decode over 2048-token prompts), the GLM-5 and GLM-4.5 shapes, and the integrity checker
# against the no-op tracker; then the kernels not yet the default (the MoE's warpgroup-MMA GEMM,
# the DSA scores on the tensor cores). Each run's failure is logged and the next still runs.
gpu_tables() {
  local bench=$build/samples/llm-bench k2=(--synthetic --preset k2-real --layers 2 --experts 8 --backend cuda)
  local rc=0 kv p
  run() {
    echo "#### $*"
    "$bench" "$@" || { echo "#### failed: $*"; rc=1; }
  }
  run "${k2[@]}" --weights bf16 --activations bf16 --sessions 1,64,256 --steps 8 --no-baselines
  run "${k2[@]}" --weights bf16 --activations bf16 --prefill-lens 512,4096 --repeats 2
  run "${k2[@]}" --weights fp8 --activations fp8 --sessions 1,64,256 --steps 8 --no-baselines
  run "${k2[@]}" --weights fp8 --activations fp8 --prefill-lens 512,4096 --repeats 2
  # MLA prefill in expanded form (FlashAttention over per-head keys and values) against the
  # absorbed rows above.
  LLMRT_CUDA_MLA_PREFILL=expanded run "${k2[@]}" --weights fp8 --activations fp8 --prefill-lens 512,4096 --repeats 2
  # The routed experts' tiles held to 32 rows (each expert's weights read once per 32 rows of a
  # 4096-token prefill: 128 times with 8 experts, 32 times with tiles of 128), against the rows above.
  LLMRT_CUDA_MOE_TILE=32 run "${k2[@]}" --weights bf16 --activations bf16 --prefill-lens 4096 --repeats 2
  # The routed experts on the CUDA-core GEMV instead of the tensor cores, for the comparison.
  LLMRT_CUDA_MOE=gemv run "${k2[@]}" --weights bf16 --activations bf16 --prefill-lens 4096 --repeats 2
  LLMRT_CUDA_MOE=gemv run "${k2[@]}" --weights fp8 --activations fp8 --sessions 64 --steps 8 --no-baselines
  run "${k2[@]}" --weights int4-g32 --sessions 1,16,64 --steps 8 --no-baselines
  # INT4 and FP8 (exact) on the CUDA-core GEMV instead of the tensor cores, for the comparison.
  LLMRT_CUDA_QUANT=gemv run "${k2[@]}" --weights int4-g32 --sessions 1,16,64 --steps 8 --no-baselines
  run "${k2[@]}" --weights fp8 --sessions 1,16,64 --steps 8 --no-baselines
  LLMRT_CUDA_QUANT=gemv run "${k2[@]}" --weights fp8 --sessions 1,16,64 --steps 8 --no-baselines
  run "${k2[@]}" --weights int4-g32 --prefill-lens 4096 --repeats 2
  for kv in bf16 fp8 fp8-tiled; do
    run "${k2[@]}" --weights fp8 --activations fp8 --kv "$kv" --kv-gib 4 --prompt 2048 --sessions 1,64 --steps 16 \
      --no-baselines
  done
  for p in glm5-real glm45-real; do
    run --synthetic --preset "$p" --layers 2 --experts 8 --backend cuda --weights fp8 --activations fp8 \
      --sessions 1,64 --steps 8 --no-baselines
  done
  # GLM-4.5's prefill: GQA attention token by token (the default), then on FlashAttention tiles.
  local g45=(--synthetic --preset glm45-real --layers 2 --experts 8 --backend cuda --weights fp8 --activations fp8)
  run "${g45[@]}" --prefill-lens 512,4096 --repeats 2
  LLMRT_CUDA_GQA_PREFILL=flash run "${g45[@]}" --prefill-lens 512,4096 --repeats 2
  run "${k2[@]}" --integrity --weights fp8 --sessions 1,64 --steps 16 --repeats 3
  # Kimi K2's layers with 64 routed experts instead of 8 (5.6 GB of FP8 experts): the routing and
  # the permutation at an expert count near the released models' (the rows above have 8), decode
  # and a 4096-token prefill.
  local k2e=(--synthetic --preset k2-real --layers 2 --experts 64 --backend cuda --weights fp8 --activations fp8)
  run "${k2e[@]}" --sessions 1,64 --steps 8 --no-baselines
  run "${k2e[@]}" --prefill-lens 4096 --repeats 2
  # Kernels not yet the default (after the rows above, so that a step cut short by its limit
  # loses these first).
  # The routed experts' grouped GEMM on Hopper's warpgroup MMAs (BF16 and FP8 experts), against
  # the mma.sync rows above.
  LLMRT_CUDA_MOE=wgmma run "${k2[@]}" --weights bf16 --activations bf16 --prefill-lens 512,4096 --repeats 2
  LLMRT_CUDA_MOE=wgmma run "${k2[@]}" --weights fp8 --activations fp8 --prefill-lens 512,4096 --repeats 2
  LLMRT_CUDA_MOE=wgmma run "${k2[@]}" --weights bf16 --activations bf16 --sessions 1,64 --steps 8 --no-baselines
  # GLM-5's prefill with the DSA indexer's scores on the CUDA cores (tiled, the default), then on
  # the tensor cores (the query in three bfloat16 parts).
  local g5=(--synthetic --preset glm5-real --layers 2 --experts 8 --backend cuda --weights fp8 --activations fp8)
  run "${g5[@]}" --prefill-lens 4096 --repeats 2
  LLMRT_CUDA_DSA_SCORES=mma run "${g5[@]}" --prefill-lens 4096 --repeats 2
  return $rc
}
export -f gpu_tables
# Nsight Compute on the kernels furthest from the copy bandwidth in the microbenchmark: the
# two-stage tensor-core MLA attention at 128K positions, BF16 KV (its 57th launch: 7 per context
# length and codec, the one-stage kernel's 42 first), the warpgroup MLA attention there, and the
# INT4 GEMV at T = 1. Where ncu cannot read the counters, the step fails and nothing else does.
ncu_bin=$(command -v ncu || ls "$cuda_root"/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
gpu_profile() {
  local sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
                  --section SchedulerStats --section MemoryWorkloadAnalysis)
  "$ncu_bin" --clock-control none -k regex:TcAttentionKernel -s 56 -c 1 "${sections[@]}" \
    "$build/tests/llmrt_cuda_microbench" || return 1
  # The warpgroup kernel at 128K positions, BF16 KV (its 15th launch: 7 per context length).
  "$ncu_bin" --clock-control none -k regex:WgAttentionKernel -s 14 -c 1 "${sections[@]}" \
    "$build/tests/llmrt_cuda_microbench" || return 1
  "$ncu_bin" --clock-control none --kernel-name-base mangled -k regex:QuantGemvKernelILi4E -s 2 -c 1 "${sections[@]}" \
    "$build/tests/llmrt_cuda_microbench" || return 1
  "$ncu_bin" --clock-control none -k regex:QuantMmaKernel -s 2 -c 1 "${sections[@]}" "$build/tests/llmrt_cuda_microbench"
}
# Where a batch-1 decode step's GPU time goes: every kernel's duration (graph nodes one by
# one) over 32 decode steps after an 8-token prompt, summed by kernel. The weight generation
# and prefill kernels are in the totals too (their names tell them apart).
gpu_breakdown() {
  local cfg
  for cfg in "--weights bf16 --activations bf16" "--weights int4-g32"; do
    echo "#### kernel time by kernel, k2-real 2 layers 8 experts, $cfg, 1 session, 32 steps"
    # shellcheck disable=SC2086  # cfg holds several arguments
    "$ncu_bin" --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv \
      --print-units base -c 4000 "$build/samples/llm-bench" --synthetic --preset k2-real --layers 2 --experts 8 \
      --backend cuda $cfg --sessions 1 --steps 32 --prompt 8 --no-baselines > "$scratch/ncu.csv" 2> "$scratch/ncu.err" ||
      { tail -5 "$scratch/ncu.err"; return 1; }
    kernel_table "$scratch/ncu.csv"
  done
}
# The ncu CSV (one row per kernel and metric: "ID",...,"Kernel Name",...,"Metric Value") summed
# by kernel name: calls, total and mean microseconds, share of all kernels' time; the top 25.
kernel_table() {
  grep -v '^"' "$1" | grep -v '^==' | tail -12
  awk -F'","' 'NF >= 15 && $0 ~ /^"[0-9]/ {
      name = $5; v = $NF; gsub(/"/, "", v); gsub(/,/, "", v)
      sub(/\(.*$/, "", name); sub(/^void /, "", name); n[name]++; t[name] += v / 1000; all += v / 1000 }
    END {
      for (k in t) printf "%12.1f %7d %10.2f %6.1f%%  %s\n", t[k], n[k], t[k] / n[k], 100 * t[k] / all, k
      printf "%12.1f %7s %10s %6s   all kernels\n", all, "", "", "" }' "$1" | sort -n -r | head -30 |
    awk 'BEGIN { printf "%12s %7s %10s %7s  %s\n", "total us", "calls", "mean us", "share", "kernel" } { print }'
}
export ncu_bin
export -f gpu_profile gpu_breakdown kernel_table
export scratch
# Held-out perplexity and top-1 accuracy of the two shipped trained models on the device against
# the CPU in the same run (tests/data/kjv_heldout.txt, 40 windows of 128 tokens): BF16 weights with
# BF16 KV, FP8 KV (read from the cache: one token a pass), INT4 g32 experts, and the BF16
# activation policy. Each pair must agree within 0.1% in perplexity and 0.002 in accuracy.
gpu_accuracy() {
  local ev=$build/samples/llm-eval text=$root/tests/data/kjv_heldout.txt rc=0 m cfg
  printf '| model | configuration | CPU perplexity | CUDA perplexity | relative | CPU top-1 | CUDA top-1 |\n|---|---|---:|---:|---:|---:|---:|\n'
  for m in models/kimi-k2-kjv-tiny models/glm4-moe-kjv-tiny; do
    for cfg in "--kv-dtype bf16" "--kv-dtype fp8 --chunk 1" "--weights int4-g32 --kv-dtype bf16" \
      "--activations bf16 --kv-dtype bf16"; do
      local cpu gpu
      # shellcheck disable=SC2086  # cfg holds several arguments
      cpu=$("$ev" --model "$root/$m" --text "$text" --max-windows 40 $cfg --backend cpu | awk -F'|' 'NR == 3 {print $7, $8}')
      # shellcheck disable=SC2086
      gpu=$("$ev" --model "$root/$m" --text "$text" --max-windows 40 $cfg --backend cuda | awk -F'|' 'NR == 3 {print $7, $8}')
      if ! echo "$cpu $gpu" | awk -v m="$m" -v c="$cfg" 'NF == 4 {
             rel = ($3 - $1) / $1; printf "| %s | %s | %.4f | %.4f | %+.5f | %.4f | %.4f |\n", m, c, $1, $3, rel, $2, $4;
             exit !(rel <= 0.001 && rel >= -0.001 && $4 - $2 <= 0.002 && $2 - $4 <= 0.002) }
           NF != 4 { printf "| %s | %s | failed to run |\n", m, c; exit 1 }'; then
        rc=1
      fi
    done
  done
  return $rc
}
export -f gpu_accuracy
step accuracy 150 gpu_accuracy
step profile 140 gpu_profile
step tables 240 gpu_tables
step breakdown 120 gpu_breakdown
echo "failed=$failed" >> "$summary"
cat "$summary"
exit $failed
