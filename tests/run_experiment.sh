#!/usr/bin/env bash
# Runs one study of experiments/ end to end: `sweep run` then `sweep report`
# into a fresh temporary folder. Passes when both exit 0: every run has a
# row and every [[expect]] of the study holds.
# Usage: run_experiment.sh PIPEGRID EXPERIMENT_FILE [JOBS]
set -u
pipegrid=$1
experiment=$2
jobs=${3:-2}
out=$(mktemp -d "${TMPDIR:-/tmp}/pipegrid-experiment.XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT

if ! "$pipegrid" sweep run "$experiment" --out "$out" --jobs "$jobs" >"$out/run.log" 2>&1; then
  echo "run_experiment.sh: pipegrid sweep run $experiment failed:" >&2
  tail -n 40 "$out/run.log" >&2
  exit 1
fi
if ! "$pipegrid" sweep report "$experiment" --out "$out" >"$out/report.log" 2>&1; then
  echo "run_experiment.sh: pipegrid sweep report $experiment failed (exit 1: an expect broke):" >&2
  tail -n 40 "$out/report.log" >&2
  exit 1
fi
tail -n 1 "$out/report.log"
