#!/usr/bin/env bash
# The model sizes of the GPU matrix (scripts/gpu-matrix.sh, gpu-report.sh):
#   scripts/gpu-model-options.sh gpu|small mlp|transformer
# gpu: an action takes a millisecond or more on a quarter of an H100, and
# 24 plans x 3 runs fit in minutes; small: a dry run on CPUs.
set -euo pipefail
case "$1:$2" in
  gpu:mlp) echo "--model-option width=4096 --model-option depth=8 --micro-batch-size 256" ;;
  gpu:transformer) echo "--model-option width=1024 --model-option heads=16 --model-option layers=8 --model-option seq=256 --micro-batch-size 8" ;;
  small:mlp) echo "--model-option width=256 --model-option depth=8 --micro-batch-size 16" ;;
  small:transformer) echo "--model-option width=64 --model-option heads=4 --model-option layers=4 --model-option seq=32 --micro-batch-size 2" ;;
  *) echo "gpu-model-options.sh: expected gpu|small and mlp|transformer, found '$1' '$2'" >&2; exit 2 ;;
esac
