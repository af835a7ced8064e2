#!/usr/bin/env bash
# Installs the Debian packages llmrt builds against, when they are missing. Idempotent.
set -euo pipefail
pkgs=(cmake g++ make pkg-config libabsl-dev nlohmann-json3-dev libhwy-dev libgtest-dev libgmock-dev libonig-dev
      libcpp-httplib-dev)
# Open MPI: the optional MPI communicator (multi-process ranks) and its two-process test.
pkgs+=(libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
