#!/usr/bin/env bash
# Run on a development machine before a device check: gathers what the build needs from Debian
# packages (headers, libraries, CMake package files, pkg-config and its .pc files) into a
# git-ignored folder that travels with the working tree to the GPU machine, which has nvcc,
# CMake and a compiler but none of these packages and no network. scripts/gpu_check.sh builds
# against that folder only.
#
# Usage: bash scripts/gpu_prepare.sh [--prebuild] [FOLDER]     (default .gpu-deps)
# The folder is also packed (xz) into .gpu-carry/deps.tar.xz, which scripts/gpu_check.sh unpacks
# where the folder is missing: carry either (the packed one is a seventh of the size). With
# --prebuild, the binaries the device run needs are also built here, against the folder exactly as
# the device would build them (scripts/gpu_check.sh's configure), and packed with their CTest
# files into .gpu-carry/prebuilt.tar.xz (debug info stripped, symbols kept): the device run then
# spends no time compiling, and builds only if they do not load there. The tracked files and
# what travels must stay within 64 MiB (the device tool's limit): the script checks the sum. A
# device run names the folder it carries in `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
prebuild=0
if [ "${1:-}" = --prebuild ]; then
  prebuild=1
  shift
fi
bash scripts/setup.sh
out=${1:-.gpu-deps}
travel_limit_mib=62  # of 64, with room for a few untracked files
# The -dev packages scripts/setup.sh installs for the build, and pkg-config itself.
dev_pkgs=(libabsl-dev nlohmann-json3-dev libhwy-dev libgtest-dev libgmock-dev libonig-dev)
rm -rf "$out"
mkdir -p "$out"
# Copies a file or link, keeping its absolute path under $out. The folder part is resolved first:
# with Debian's merged /usr, ldd and dpkg may name /lib/... for what lies in /usr/lib/..., and a
# library copied under $out/lib would sit beside no link of its (LD_LIBRARY_PATH names usr/lib).
copy() {
  local f
  f=$(readlink -f "$(dirname "$1")")/$(basename "$1")
  mkdir -p "$out$(dirname "$f")"
  cp -a "$f" "$out$f"
}
for p in "${dev_pkgs[@]}"; do
  while IFS= read -r f; do
    case "$f" in /usr/share/doc/* | /usr/share/lintian/* | /usr/src/*) continue ;; esac
    [ -d "$f" ] && [ ! -L "$f" ] && continue
    [ -e "$f" ] || continue
    copy "$f"
    # A development link (libfoo.so -> libfoo.so.N) brings the runtime library it names.
    if [ -L "$f" ]; then
      target=$(readlink -f "$f")
      copy "$target"
      # and the SONAME link the dynamic loader looks for (libfoo.so.N -> libfoo.so.N.M)
      for l in "${target%%.so*}".so*; do
        [ -L "$l" ] && copy "$l"
      done
    fi
  done < <(dpkg -L "$p")
done
# pkg-config (pkgconf) and its library.
pc=$(readlink -f "$(command -v pkg-config)")
copy "$pc"
ln -sf "$(basename "$pc")" "$out/usr/bin/pkg-config"
while read -r lib; do
  case "$lib" in *libpkgconf*) copy "$lib"; copy "$(readlink -f "$lib")" ;; esac
done < <(ldd "$pc" | awk '/=>/ {print $3}')
# .pc files name their prefix relative to where they lie, so the folder can move.
find "$out" -name '*.pc' -exec sed -i -e 's|^prefix=/usr$|prefix=${pcfiledir}/../../..|' \
  -e 's|^exec_prefix=/usr$|exec_prefix=${prefix}|' -e 's|=/usr/|=${prefix}/|' {} +
# Absolute links would point back into this machine's /usr.
if find "$out" -type l -lname '/*' | grep -q .; then
  echo "gpu_prepare: absolute links left in $out:" >&2
  find "$out" -type l -lname '/*' >&2
  exit 1
fi
# The gathered pkg-config must find its own library there (a device machine has no other).
libdir=$(readlink -f "$out")/usr/lib/x86_64-linux-gnu
if ! LD_LIBRARY_PATH=$libdir ldd "$out/usr/bin/pkg-config" | grep libpkgconf | grep -q "$(readlink -f "$out")"; then
  echo "gpu_prepare: the gathered pkg-config does not load its library from $libdir:" >&2
  LD_LIBRARY_PATH=$libdir ldd "$out/usr/bin/pkg-config" >&2
  exit 1
fi
size=$(du -sm "$out" | cut -f1)
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
tracked_mib=$((tracked / 1048576))
if [ $((size + tracked_mib)) -gt "$travel_limit_mib" ]; then
  echo "gpu_prepare: $out ($size MiB) and the tracked files ($tracked_mib MiB) exceed $travel_limit_mib MiB" >&2
  exit 1
fi
git check-ignore -q "$out" || { echo "gpu_prepare: $out is not git-ignored" >&2; exit 1; }
echo "gpu_prepare: $out holds $size MiB ($(find "$out" -type f | wc -l) files) from ${dev_pkgs[*]} and pkg-config;" \
  "with the tracked files ($tracked_mib MiB) it travels in $((size + tracked_mib)) of 64 MiB"

carry=.gpu-carry
mkdir -p "$carry"
git check-ignore -q "$carry" || { echo "gpu_prepare: $carry is not git-ignored" >&2; exit 1; }
rm -f "$carry/prebuilt.tar.xz"
tar -cf - "$out" | xz -T2 -6 > "$carry/deps.tar.xz"
if [ "$prebuild" -eq 1 ]; then
  build=${LLMRT_GPU_BUILD_DIR:-build-gpu}
  log=$(mktemp -d)
  if ! LLMRT_GPU_DEPS=$out LLMRT_GPU_CHECK_BUILD_ONLY=full OUT=$log bash scripts/gpu_check.sh; then
    cat "$log/setup.log" >&2
    echo "gpu_prepare: the build against $out failed (above)" >&2
    exit 1
  fi
  stage=$(mktemp -d)
  mkdir -p "$stage/$build/tests" "$stage/$build/samples"
  # The binaries, debug info stripped (symbols stay, for compute-sanitizer's stacks).
  for b in tests/llmrt_backend_tests tests/llmrt_golden_tests tests/llmrt_cuda_microbench \
    tests/llmrt_nccl_tests samples/llm-bench samples/llm-make-bench-model samples/llm-eval; do
    [ -f "$build/$b" ] && strip --strip-debug -o "$stage/$build/$b" "$build/$b"
  done
  for l in "$build"/libllmrt.so*; do
    if [ -L "$l" ]; then cp -a "$l" "$stage/$l"; else strip --strip-debug -o "$stage/$l" "$l"; fi
  done
  # What CTest reads (gtest_discover_tests' lists included), and the configuration.
  (cd "$build" && find . \( -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' \) \
    -exec cp --parents {} "$stage/$build/" \;)
  cp "$build/CMakeCache.txt" "$stage/$build/"
  # The checkout the paths recorded in them point into (a link on the device when it differs).
  readlink -f . > "$stage/$build/prebuilt_source"
  git rev-parse HEAD > "$stage/$build/prebuilt_commit"
  git status --porcelain --untracked-files=no | sed 's/^/changed: /' >> "$stage/$build/prebuilt_commit"
  tar -C "$stage" -cf - "$build" | xz -T2 -6 > "$carry/prebuilt.tar.xz"
  rm -rf "$stage" "$log"
fi
packed=$(du -cb "$carry"/*.tar.xz | tail -1 | cut -f1)
if [ $((tracked + packed)) -gt $((travel_limit_mib * 1048576)) ]; then
  echo "gpu_prepare: $carry ($((packed / 1048576)) MiB) and the tracked files exceed $travel_limit_mib MiB" >&2
  exit 1
fi
echo "gpu_prepare: $carry holds $(ls "$carry" | tr '\n' ' ')($((packed / 1024)) KiB); carry $carry (or $out) in the device run"
