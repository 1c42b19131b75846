#!/usr/bin/env bash
# The SimGrid half of issue 5's GPU matrix: reads scripts/gpu-matrix.sh's
# archive, simulates every plan with the profile and platform calibrated on
# the GPU, compares with the measured runs (`pipegrid validate --measured`)
# and prints the error table in Markdown (docs/validation.md, "GPU matrix").
#
#   scripts/gpu-report.sh gpu-matrix.tar.gz [REPORT_DIR]
#
# REPORT_DIR (default gpu-report/) receives one JSON report and one SVG (the
# simulated timeline over the first measured one) per plan.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
archive=${1:?usage: scripts/gpu-report.sh gpu-matrix.tar.gz [REPORT_DIR]}
report=${2:-gpu-report}
pipegrid=${PIPEGRID:-$here/build/pipegrid}
work=$(mktemp -d /tmp/gpu-report.XXXXXX)
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xzf "$archive"
matrix="$work/matrix"
mkdir -p "$report"

read -r device sizes <"$matrix/device.txt"
model_options() { "$here/scripts/gpu-model-options.sh" "$sizes" "$1"; }

echo "| plan | simulated | measured (median of runs) | relative error | run spread | action error median / p95 |"
echo "| --- | --- | --- | --- | --- | --- |"
# plans.txt: plan model partitions schedule M repeats [stages mini-batches
# warm-up] (archives from before interleaved and pipedream lack the last three).
while read -r plan model n schedule m repeats stages minis warm; do
  measured=$(ls "$matrix/$plan"-r*.csv | sort | paste -sd, -)
  # Schedules without a flush are compared in the steady state: the
  # simulation runs as many mini-batches as it needs to confirm a cycle, and
  # the runs' warm-up (plans.txt) puts both cycles at one phase.
  case "$schedule" in pipedream* | pipeoptim) count="--warmup ${warm:-2}" ;; *) count="--mini-batches ${minis:-5}" ;; esac
  if ! "$pipegrid" validate --model "$model" $(model_options "$model") --schedule "$schedule" --stages "${stages:-$n}" \
      --micro-batches "$m" --device "$device:$n" $count \
      --profile "$matrix/$model-p$n.json" --platform "$matrix/$model-p$n.xml" --measured "$measured" \
      ${TRANSFER_RULE:+--transfer-rule "$TRANSFER_RULE"} \
      --svg "$report/$plan.svg" --json >"$report/$plan.json" 2>"$work/$plan.err"; then
    echo "| $plan | validate failed: $(tail -1 "$work/$plan.err" | cut -c1-150) | | | | |"
    rm -f "$report/$plan.json"
    continue
  fi
  python3 - "$report/$plan.json" "$plan" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
simulated = r["simulated_minibatch_time_s"]
times = r.get("spread", {}).get("measured_minibatch_time_s") or {"min": r["measured_minibatch_time_s"],
                                                                  "median": r["measured_minibatch_time_s"],
                                                                  "max": r["measured_minibatch_time_s"]}
print("| {} | {:.3f} ms | {:.3f} ms | {:+.1%} | {:.1%} | {:.1%} / {:.1%} |".format(
    sys.argv[2], 1e3 * simulated, 1e3 * times["median"], simulated / times["median"] - 1,
    (times["max"] - times["min"]) / times["median"], r["action_error_median"], r["action_error_p95"]))
EOF
done <"$matrix/plans.txt"
python3 - "$report" <<'EOF'
import glob, json, statistics, sys
def error_of_median(r):
    times = r.get("spread", {}).get("measured_minibatch_time_s")
    return r["simulated_minibatch_time_s"] / times["median"] - 1 if times else r["relative_error"]
errors = [abs(error_of_median(json.load(open(f)))) for f in sorted(glob.glob(sys.argv[1] + "/*.json"))]
if errors:
    print("\n{} plans: median |error| {:.1%}, max {:.1%}; within 10%: {}".format(
        len(errors), statistics.median(errors), max(errors), sum(e <= 0.10 for e in errors)))
EOF
