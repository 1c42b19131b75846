#!/usr/bin/env bash
# Compiles validate/cuda/cuda_backend.cpp (and validate/c10d.cpp's NCCL path) alone against Debian's LibTorch
# headers (1.13) and the CUDA toolkit's (/usr/local/cuda), without a CUDA
# LibTorch: the only check of that file a machine without a GPU can make.
# Debian's CPU build lacks c10/cuda/impl/cuda_cmake_macros.h; a one-line
# stand-in in a temporary folder takes its place.
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=${CUDA_HOME:-/usr/local/cuda}
macros_dir=$(mktemp -d)
trap 'rm -rf "$macros_dir"' EXIT
mkdir -p "$macros_dir/c10/cuda/impl"
echo '#pragma once' >"$macros_dir/c10/cuda/impl/cuda_cmake_macros.h"
g++ -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -DPIPEGRID_CUDA_BACKEND -I"$macros_dir" -I. \
  -isystem /usr/include/torch/csrc/api/include -isystem "$cuda/include" validate/cuda/cuda_backend.cpp
for source in validate/cuda/copy_probe.cpp; do
  g++ -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -I"$macros_dir" -I. \
    -isystem /usr/include/torch/csrc/api/include -isystem "$cuda/include" "$source"
done
echo "validate/cuda/cuda_backend.cpp compiles against LibTorch $(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null || echo '?') and $cuda"
# The NCCL transport of the c10d launchers (validate/c10d.cpp), likewise:
# compiled against ProcessGroupNCCL's header, never run here.
g++ -std=c++20 -fsyntax-only -Wall -Wextra -DUSE_C10D_GLOO -DUSE_C10D_NCCL -DPIPEGRID_NCCL_TRANSPORT -I"$macros_dir" -I. \
  -isystem /usr/include/torch/csrc/api/include -isystem "$cuda/include" validate/c10d.cpp
echo "validate/c10d.cpp (NCCL transport) compiles against the same headers"
