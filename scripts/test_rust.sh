#!/usr/bin/env bash
# Tests the Rust binding (bindings/rust) against the library that scripts/test.sh built in build/:
# installs it into build/prefix, then runs `cargo test` and the chat sample, offline, with the
# crate finding the library through build/prefix's llmrt.pc. CI runs it after scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${LLMRT_BUILD_DIR:-build}

# cargo 1.77 or newer (offset_of!, Cargo.lock v4 needs 1.78) and pkg-config. Debian 12's `cargo`
# package is 1.63, too old; its `cargo-web` package (the toolchain Debian keeps current for the
# browsers) provides `cargo`.
[ -x "$HOME/.cargo/bin/cargo" ] && PATH="$HOME/.cargo/bin:$PATH"
cargo_ok() {
  command -v cargo >/dev/null || return 1
  local v
  v=$(cargo --version | awk '{print $2}')
  [ "$(printf '%s\n1.78.0\n' "${v%%-*}" | sort -V | head -1)" = "1.78.0" ]
}
missing=()
cargo_ok || missing+=(cargo-web)
command -v pkg-config >/dev/null || missing+=(pkg-config)
if ((${#missing[@]})); then
  echo "test_rust: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  cargo_ok || { echo "test_rust: no cargo >= 1.78 after installing cargo-web ($(cargo --version 2>&1))" >&2; exit 1; }
fi

if [ ! -e "$build/libllmrt.so" ]; then
  echo "test_rust: $build/libllmrt.so is missing: run scripts/test.sh (or cmake -S . -B $build && cmake --build $build) first" >&2
  exit 1
fi
prefix=$root/$build/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(find "$prefix" -name llmrt.pc -path '*pkgconfig*' | head -1)
[ -n "$pc" ] || { echo "test_rust: cmake --install put no llmrt.pc under $prefix" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
unset LLMRT_LIB_DIR LD_LIBRARY_PATH
# Build outputs stay in the build directory, out of the source tree.
export CARGO_TARGET_DIR=$root/$build/rust-target
export CARGO_TERM_COLOR=never

cd bindings/rust
echo "test_rust: $(cargo --version), library from $PKG_CONFIG_PATH"
cargo test --offline --locked

# The sample, once: its greedy continuation of the shipped model is exact (llm-run's).
want=$'In the beginning of the creation of the flesh is the end of the flesh.\nFor the end of this world are ye, which'
got=$(cargo run --offline --locked -q --example chat -- --generate "In the beginning" --max-tokens 24 2>/dev/null)
if [ "$got" != "$want" ]; then
  printf 'test_rust: the chat sample printed\n%s\nwant\n%s\n' "$got" "$want" >&2
  exit 1
fi
# A two-turn conversation from standard input.
printf 'Who made the heaven and the earth?\nAnd what did he say?\n' |
  cargo run --offline --locked -q --example chat -- --system "Answer in the words of the book." --max-tokens 32 >/dev/null
echo "test_rust: the chat sample ran"
