#!/usr/bin/env bash
# Tests the Go binding (bindings/go) against an installed copy of the library: installs Go and
# pkg-config when missing, installs build/ (made by scripts/test.sh) into build/prefix, then runs
# go vet, the package's tests under the race detector, and the sample, whose greedy output is
# checked. LLMRT_PREFIX names an existing installation to use instead; LLMRT_BUILD_DIR another
# build directory. CI runs it after scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

pkgs=(golang-go pkg-config gcc)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "test_go: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build=${LLMRT_BUILD_DIR:-build}
case "$build" in /*) ;; *) build=$root/$build ;; esac
prefix=${LLMRT_PREFIX:-}
if [ -z "$prefix" ]; then
  prefix=$build/prefix
  cmake --install "$build" --prefix "$prefix" >/dev/null
fi

# The library directory is the install's (lib, or lib/<multiarch> on some configurations).
pc=$(find "$prefix" -name llmrt.pc -path '*/pkgconfig/*' | head -n 1)
if [ -z "$pc" ]; then
  echo "test_go: no llmrt.pc under $prefix" >&2
  exit 1
fi
export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
libdir=$(pkg-config --variable=libdir llmrt)
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Everything Go writes stays under the build directory; no module is ever downloaded.
export GOPATH=$build/go/path GOCACHE=$build/go/cache GOFLAGS=-mod=mod GOPROXY=off CGO_ENABLED=1
echo "test_go: $(go version), llmrt $(pkg-config --modversion llmrt) in $libdir"

cd "$root/bindings/go"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "test_go: not gofmt-formatted: $unformatted" >&2
  exit 1
fi
go vet ./...
# cgocheck=2 checks every pointer the binding hands to C against cgo's rules.
GODEBUG=cgocheck=2 go test -race -count=1 ./...

# The sample, once, over the shipped model: its greedy continuation is that of llm-run.
want="In the beginning of the creation of the flesh is the end of the flesh.
For the end of this world are ye, which"
got=$(go run ./cmd/llmrt-chat -model "$root/models/kimi-k2-kjv-tiny" -prompt "In the beginning" -max-tokens 24 2>/dev/null)
if [ "$got" != "$want" ]; then
  printf 'test_go: llmrt-chat printed\n%s\nwant\n%s\n' "$got" "$want" >&2
  exit 1
fi
echo "test_go: llmrt-chat OK"
