#!/usr/bin/env bash
# A resumed sweep writes the current plan's label values: runs whose key
# already has a row are not rerun, but a label changed in the file (or by
# --set) must not keep the value recorded before (labels are no part of the
# run key). Usage: check_sweep_relabel.sh PIPEGRID SOURCE_DIR
set -u
pipegrid=$1
root=$2
experiment=$root/experiments/pipedream-1f1b-rr-timelines.toml
out=$(mktemp -d "${TMPDIR:-/tmp}/pipegrid-relabel.XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT
"$pipegrid" sweep run "$experiment" --out "$out" --jobs 2 >/dev/null 2>&1 || { echo "first run failed" >&2; exit 1; }
"$pipegrid" sweep run "$experiment" --out "$out" --jobs 2 --set class=relabelled >"$out/log" 2>&1 || { cat "$out/log" >&2; exit 1; }
grep -q "4 of 4 runs already have a row" "$out/log" || { echo "expected the second run to resume:" >&2; cat "$out/log" >&2; exit 1; }
rows=$(grep -c ',relabelled,' "$out/runs.csv")
if [ "$rows" != 4 ]; then
  echo "runs.csv kept the old label values after resuming: $rows of 4 rows have class = relabelled" >&2
  exit 1
fi
