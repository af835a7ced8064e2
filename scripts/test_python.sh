#!/usr/bin/env bash
# Tests the Python binding (bindings/python) against the library that scripts/test.sh built in
# build/ (LLMRT_BUILD_DIR): installs it into build/prefix, installs the package into a virtual
# environment with pytest, runs the package's tests and its sample. What CI runs after test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LLMRT_BUILD_DIR:-build}
py=${PYTHON:-python3}
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo

apt_install() {  # Debian packages, only when missing
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "test_python: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "test_python: $build/ has no build of llmrt; run scripts/test.sh first" >&2
  exit 1
fi
command -v pkg-config >/dev/null || apt_install pkg-config

# The library as a host installs it; the binding finds it through llmrt.pc.
prefix="$PWD/$build/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
unset LLMRT_LIBRARY LLMRT_LIB_DIR
want=$(pkg-config --variable=libdir llmrt)
[ "$(cd "$want" && pwd -P)" = "$(cd "$prefix/lib" && pwd -P)" ] || {
  echo "test_python: pkg-config finds llmrt in $want, not in $prefix/lib" >&2
  exit 1
}

# A virtual environment, so that nothing is installed into the system's Python (Debian marks it
# externally managed). It sees the system's site packages, so Debian's python3-* packages serve
# when PyPI cannot be reached. Debian's python3 needs python3-venv to make one.
venv="$build/python-venv"
if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv --system-site-packages "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    apt_install python3-venv
    "$py" -m venv --system-site-packages "$venv"
  fi
fi
vpy="$venv/bin/python"

need_module() {  # need_module CHECK PIP_SPEC DEBIAN_PACKAGE: pip first, then apt
  "$vpy" -c "$1" 2>/dev/null && return 0
  "$vpy" -m pip install -q --disable-pip-version-check "$2" 2>/dev/null && "$vpy" -c "$1" 2>/dev/null && return 0
  command -v dpkg-query >/dev/null && apt_install "$3"
  "$vpy" -c "$1" || { echo "test_python: cannot install $2" >&2; exit 1; }
}
# setuptools >= 61 reads pyproject.toml; wheel builds the wheel (setuptools < 70.1 needs it).
need_module 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 61)' "setuptools>=61" \
  python3-setuptools
need_module 'import wheel' wheel python3-wheel
need_module 'import pytest' pytest python3-pytest
# --no-build-isolation --no-index: builds with what is installed, offline.
rm -rf bindings/python/build
"$vpy" -m pip install -q --disable-pip-version-check --no-build-isolation --no-index --force-reinstall --no-deps \
  ./bindings/python

# From outside the source tree, so the installed package is what is tested.
root=$PWD
(cd bindings/python/tests && LLMRT_REPO_ROOT="$root" "$root/$vpy" -m pytest -q -p no:cacheprovider .)
echo "test_python: sample"
out=$("$vpy" bindings/python/examples/chat.py --model models/kimi-k2-kjv-tiny --prompt "In the beginning" --max-tokens 24)
printf '%s\n' "$out"
want=$'In the beginning of the creation of the flesh is the end of the flesh.\nFor the end of this world are ye, which'
[ "$out" = "$want" ] || { echo "test_python: the sample's continuation differs from llm-run's" >&2; exit 1; }
"$vpy" bindings/python/examples/chat.py --model models/kimi-k2-kjv-tiny --chat "Who made the heaven and the earth?" \
  --max-tokens 32
