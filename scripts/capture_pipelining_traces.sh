#!/usr/bin/env bash
# Driver for scripts/capture_pipelining_traces.py on the lent GPU machine (issue 31's test data:
# Kineto traces of torch.distributed.pipelining's own schedules, all ranks on the one GPU).
# Run from anywhere; OUT must name the folder that comes back:
#
#   OUT=/some/dir scripts/capture_pipelining_traces.sh [extra options for the .py]
#
# Writes the machine's description (nvidia-smi, python/torch/CUDA/NCCL versions) at the head of
# $OUT/log.txt and on stdout, runs the capture under `timeout 420` (the script itself starts no
# attempt after its 270-second budget), then lists $OUT and the archives' contents.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
{
  echo "== $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi || echo "nvidia-smi failed"
  python3 - <<'PY' || echo "python3/torch version check failed"
import sys
import torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "cuda available", torch.cuda.is_available())
try:
    print("nccl", torch.cuda.nccl.version())
except Exception as e:
    print("nccl version unavailable:", e)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, p.multi_processor_count, "SMs", p.total_memory // 2**20, "MiB")
PY
} 2>&1 | tee -a "$OUT/log.txt"
export PYTHONUNBUFFERED=1
timeout -k 20 420 python3 scripts/capture_pipelining_traces.py --out "$OUT" "$@"
status=$?
echo "== capture exit status $status"
ls -la "$OUT"
for archive in "$OUT"/traces-*.tar.gz; do
  [ -e "$archive" ] || continue
  echo "== $archive"
  tar -tzvf "$archive"
done
exit $status
