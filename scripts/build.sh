#!/usr/bin/env bash
# Installs pipegrid's build dependencies from Debian 12 packages (when run as
# root and something is missing) and builds it into ./build.
# Usage: scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libsimgrid-dev libboost-dev libeigen3-dev nlohmann-json3-dev libcli11-dev libfmt-dev
          libtomlplusplus-dev libssl-dev
          libgtest-dev libgmock-dev libbenchmark-dev libtorch-dev libopenblas0-openmp
          libgloo-dev  # the headers of LibTorch's ProcessGroupGloo (--launcher processes|env)
          openmpi-bin  # a launcher only: the sweep tests run `mpirun -n 2 pipegrid sweep run ... --shard auto`
          clang libclang-rt-dev)  # clang: the sanitizer build of .ci/run
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/build.sh: missing Debian packages: ${missing[*]} (run as root, or install them)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build build -j"$jobs"
