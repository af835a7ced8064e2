#!/usr/bin/env bash
# Run on a development machine before a device check: gathers what the build needs from Debian
# packages (headers, libraries, CMake package files, pkg-config and its .pc files) into a
# git-ignored folder that travels with the working tree to the GPU machine, which has nvcc,
# CMake and a compiler but none of these packages and no network. scripts/gpu_check.sh builds
# against that folder only.
#
# Usage: bash scripts/gpu_prepare.sh [FOLDER]     (default .gpu-deps)
# The folder and the tracked files travel together, at most 64 MiB in all (the device tool's
# limit): the script checks the sum. A device run must name the folder in its `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
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
