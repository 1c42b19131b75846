#!/usr/bin/env bash
# Scale jobs of issue 28, item 5: generate a DGX-like leaf-spine platform
# with `pipegrid platform cluster`, run `pipegrid simulate` on it, and print
# per job: the platform's generation time and size, the simulation's wall
# time, peak resident memory (GNU time's "Maximum resident set size": the
# largest process of the tree), the activities (timeline CSV records:
# computes, transfers, collectives) and activities per second. Asserts
# nothing; a job pipegrid refuses prints its message (docs/performance.md,
# Jobs of 6,144 and 16,384 GPUs).
#
# Usage: bench/scale_jobs.sh [PIPEGRID] [WORKDIR] [FILTER]
#   PIPEGRID  the binary (default build/pipegrid)
#   WORKDIR   where platforms and timelines go (default a fresh mktemp -d)
#   FILTER    run the jobs whose name contains it (default all)
# Set SCALE_JOBS_TIMEOUT (seconds, default 600) to stop a job earlier.
#
# The jobs (the issue's aims: 60 s and 2 GB on 2 cores; 3 minutes):
#   gpt462b-6144: GPT 462B (hidden 18432, 112 layers, 144 heads of 128,
#     sequence 4096), t 8, p 16, d 48, 64 micro-batches of 1 per pipeline,
#     1F1B, SimGrid's default network, on 768 DGX A100 (8 x A100 80 GB,
#     NVLink 300 GB/s per direction, 8 x 200 Gb/s HDR NICs, 32 servers per
#     leaf, non-blocking), Megatron's distributed optimizer
#     (--use-distributed-optimizer: reduce-scatter, step, all-gather).
#   gpt-16384: hidden 16384, 128 layers, 128 heads, sequence 4096, t 8,
#     p 16, d 128, interleaved 1F1B with 2 virtual stages, 64 micro-batches
#     per pipeline, on 2,048 DGX H100 (8 x H100 80 GB, NVLink 450 GB/s per
#     direction, 8 x 400 Gb/s NDR NICs, 32 servers per leaf, non-blocking).
#   gpt462b-2048: the first job at d 16 (2,048 GPUs, 256 servers).
set -u
PIPEGRID=$(realpath "${1:-build/pipegrid}")
WORK=${2:-$(mktemp -d)}
FILTER=${3:-}
TIMEOUT=${SCALE_JOBS_TIMEOUT:-600}
mkdir -p "$WORK"
cd "$WORK" || exit 1

a100='--device A100 --memory 80GB --intra 300GBps,2us --inter 200Gbps,5us --nic per-gpu'
h100='--device H100 --memory 80GB --intra 450GBps,2us --inter 400Gbps,5us --nic per-gpu'
gpt462b='--model gpt --layers 112 --hidden 18432 --heads 144 --sequence 4096 --micro-batch-size 1 --dtype bf16'
gpt16k='--model gpt --layers 128 --hidden 16384 --heads 128 --sequence 4096 --micro-batch-size 1 --dtype bf16'

# name | servers | platform options | simulate options
jobs=(
  "gpt462b-2048|256|$a100 --servers-per-leaf 32|$gpt462b --tensor-parallel 8 --pipeline-parallel 16 --data-parallel 16 --schedule 1f1b-sno --micro-batches 64 --partition megatron --use-distributed-optimizer --sequence-parallel --recompute-granularity selective"
  "gpt462b-6144|768|$a100 --servers-per-leaf 32|$gpt462b --tensor-parallel 8 --pipeline-parallel 16 --data-parallel 48 --schedule 1f1b-sno --micro-batches 64 --partition megatron --use-distributed-optimizer --sequence-parallel --recompute-granularity selective"
  "gpt-16384|2048|$h100 --servers-per-leaf 32|$gpt16k --tensor-parallel 8 --pipeline-parallel 16 --data-parallel 128 --schedule interleaved-1f1b --virtual-stages 2 --micro-batches 64 --partition megatron --use-distributed-optimizer --sequence-parallel --recompute-granularity selective"
)

seconds() { awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' "$1"; }
peak_kb() { awk -F': ' '/Maximum resident set size/ { print $2 }' "$1"; }

echo "pipegrid: $PIPEGRID ($("$PIPEGRID" --version 2>/dev/null | head -n 1)); $(nproc) CPUs; work in $WORK"
for job in "${jobs[@]}"; do
  IFS='|' read -r name servers platform simulate <<<"$job"
  [[ -n "$FILTER" && "$name" != *"$FILTER"* ]] && continue
  echo "== $name"
  # shellcheck disable=SC2086
  /usr/bin/time -v "$PIPEGRID" platform cluster --servers "$servers" --gpus-per-server 8 $platform \
    --output "$name.xml" >"$name.platform.out" 2>"$name.platform.time"
  echo "platform: $(cat "$name.platform.out")"
  echo "platform: $(stat -c %s "$name.xml") bytes ($(( $(stat -c %s "$name.xml") / (servers * 8) )) per GPU) in" \
       "$(seconds "$name.platform.time") s, peak $(( $(peak_kb "$name.platform.time") / 1024 )) MiB"
  # shellcheck disable=SC2086
  /usr/bin/time -v timeout "$TIMEOUT" "$PIPEGRID" simulate --platform "$name.xml" $simulate --csv "$name.csv" \
    >"$name.out" 2>"$name.err"
  status=$(awk -F': ' '/Exit status/ { print $2 }' "$name.err")
  wall=$(seconds "$name.err")
  peak=$(( $(peak_kb "$name.err") / 1024 ))
  if [[ "$status" == 0 ]]; then
    activities=$(( $(grep -vc '^#' "$name.csv") - 1 ))
    echo "simulate: $wall s, peak $peak MiB, $activities activities, $(awk -v a="$activities" -v s="$wall" 'BEGIN { printf "%.0f", a / s }') activities/s"
    grep -E "^ *(iteration|makespan|throughput)" "$name.out" | head -n 3
  elif [[ "$status" == 124 ]]; then
    echo "simulate: stopped after $TIMEOUT s (SCALE_JOBS_TIMEOUT), peak $peak MiB"
  else
    echo "simulate: exit $status after $wall s, peak $peak MiB: $(grep -m1 'error' "$name.err")"
  fi
done
