#!/usr/bin/env bash
# Installs pipegrid's build dependencies from Debian 12 packages (when run as
# root and something is missing) and builds it into ./build with Ninja.
# Usage: scripts/build.sh [--demo] [extra cmake -D options]
#   --demo  installs only what the `pipegrid` executable needs and builds only
#           it (no LibTorch, tests or benchmarks): the README's first command.
#   without --demo: everything (pipegrid-torch, tests, benchmarks, the
#           Python module in build/python: docs/python.md).
# Both forms pass the same options (only their values differ) and compile
# with the same flags, so either reconfigures a build/ the other one left,
# and the full build reuses every object the demo build compiled. Compile
# flags: -O2, no debug information (pass -DCMAKE_BUILD_TYPE=RelWithDebInfo
# for it). A build/ left by another generator is removed and rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."

demo=false
if [ "${1:-}" = "--demo" ]; then
  demo=true
  shift
fi

# What `pipegrid` needs: compiler, CMake + Ninja, and the libraries it links.
packages=(g++ cmake ninja-build pkg-config libsimgrid-dev libboost-dev libeigen3-dev nlohmann-json3-dev libcli11-dev libfmt-dev
          libtomlplusplus-dev libssl-dev
          protobuf-compiler libprotobuf-dev)  # Chakra execution traces (interchange/)
if ! $demo; then
  packages+=(build-essential
             libgtest-dev libgmock-dev libbenchmark-dev libtorch-dev libopenblas0-openmp
             libgloo-dev  # the headers of LibTorch's ProcessGroupGloo (--launcher processes|env)
             openmpi-bin  # a launcher only: the sweep tests run `mpirun -n 2 pipegrid sweep run ... --shard auto`
             clang libclang-rt-dev  # clang: the sanitizer build of .ci/run
             pybind11-dev python3-dev  # the Python module (python/, docs/python.md)
             python3-protobuf)  # tests/scripts/write_chakra_traces.py, the independent Chakra writer
fi
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

# CMake keeps every -D value in build/CMakeCache.txt: each option below is
# passed by both forms, so switching form never keeps the other's values.
if $demo; then everything=OFF; else everything=ON; fi
options=(-G Ninja
         -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG"
         -DPIPEGRID_WITH_SIMGRID=ON -DPIPEGRID_SANITIZE=OFF -DPIPEGRID_BUILD_FUZZERS=OFF
         -DPIPEGRID_WITH_TORCH=$everything -DPIPEGRID_BUILD_TESTS=$everything -DPIPEGRID_BUILD_BENCH=$everything
         -DPIPEGRID_BUILD_PYTHON=$everything)

if [ -f build/CMakeCache.txt ] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' build/CMakeCache.txt; then
  echo "scripts/build.sh: build/ was configured with another generator than Ninja: removing it" >&2
  rm -rf build
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build "${options[@]}" "$@" >/dev/null
if $demo; then
  cmake --build build -j"$jobs" --target pipegrid
else
  cmake --build build -j"$jobs"
fi
