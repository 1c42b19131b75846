#!/usr/bin/env bash
# Downloads, on a Debian 12 machine with a package registry, the Debian
# packages pipegrid's real-execution build needs and a GPU machine without a
# registry lacks (nlohmann-json, CLI11, fmt, Eigen, toml++; OpenSSL where the
# machine has none), into .gpu-deps/ (git-ignored).
# The device tool carries that folder (carry: [".gpu-deps"]) and
# scripts/gpu-matrix.sh unpacks it there with dpkg -x. SimGrid stays behind:
# the GPU side builds with -DPIPEGRID_WITH_SIMGRID=OFF and the simulation runs
# here (scripts/gpu-report.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-deps
cd .gpu-deps
rm -f ./*.deb
apt-get download nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libeigen3-dev libtomlplusplus-dev libtomlplusplus3 libssl-dev libssl3 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
ls -1 ./*.deb
