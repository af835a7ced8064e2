#!/usr/bin/env bash
# Installs the built llmrt into a scratch prefix, then builds a C program with pkg-config and a C++
# program with find_package(llmrt) outside the tree, and runs both on a committed checkpoint.
# usage: test_install.sh BUILD_DIR MODEL_DIR EXPECTED_IDS SCRATCH
set -euo pipefail
build=$1 model=$2 want=$3 scratch=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$scratch" && mkdir -p "$scratch"
prefix=$scratch/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name libllmrt.so | head -1)")

export PKG_CONFIG_PATH=$libdir/pkgconfig
test "$(pkg-config --modversion llmrt)" = "$(grep -m1 -o '"[0-9.]*"' "$prefix/include/llmrt/llmrt.h" | tr -d '"')"
cc -std=c11 -Wall -Werror -o "$scratch/consumer_c" "$here/consumer.c" $(pkg-config --cflags --libs llmrt)
LD_LIBRARY_PATH=$libdir "$scratch/consumer_c" "$model" "$want"

cmake -S "$here" -B "$scratch/cxx" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/cxx" >/dev/null
"$scratch/cxx/consumer_cxx" "$model" "$want"   # CMake's build RPATH finds the installed library
