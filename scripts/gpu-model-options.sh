#!/usr/bin/env bash
# The model sizes of the GPU matrix (scripts/gpu-matrix.sh, gpu-report.sh):
#   scripts/gpu-model-options.sh gpu|small mlp|gpt
# gpu: an action takes a millisecond or more on a quarter of an H100, and
# 24 plans x 3 runs fit in minutes; small: a dry run on CPUs.
set -euo pipefail
case "$1:$2" in
  gpu:mlp) echo "--hidden 4096 --layers 8 --micro-batch-size 256" ;;
  gpu:gpt) echo "--hidden 1024 --heads 16 --layers 8 --sequence 256 --micro-batch-size 8" ;;
  small:mlp) echo "--hidden 256 --layers 8 --micro-batch-size 16" ;;
  small:gpt) echo "--hidden 64 --heads 4 --layers 4 --sequence 32 --micro-batch-size 2" ;;
  *:transformer) echo "gpu-model-options.sh: the model transformer is called gpt now (a matrix from before: rename it in plans.txt)" >&2; exit 2 ;;
  *) echo "gpu-model-options.sh: expected gpu|small and mlp|gpt, found '$1' '$2'" >&2; exit 2 ;;
esac
