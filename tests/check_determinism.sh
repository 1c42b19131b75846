#!/usr/bin/env bash
# Same inputs, byte-identical outputs: runs each command twice (in two fresh
# folders, so that relative paths in the outputs agree) and compares every
# output file and stdout byte for byte; explore runs with --jobs 1 and
# --jobs 2. Usage: check_determinism.sh PIPEGRID ROOT
set -u
PIPEGRID=$1 ROOT=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
cases=0

# same NAME SETUP COMMAND_A COMMAND_B: runs SETUP then COMMAND_A in
# $scratch/NAME/a, SETUP then COMMAND_B in $scratch/NAME/b, and compares the
# two folders (every file, and stdout) byte for byte. `sed_stdout`, when set,
# edits both stdouts first (for the one line that names --jobs).
same() {
  local name=$1 setup=$2 first=$3 second=$4 side
  cases=$((cases + 1))
  for side in a b; do
    mkdir -p "$scratch/$name/$side"
    local command=$first
    [ "$side" = b ] && command=$second
    (cd "$scratch/$name/$side" && eval "$setup" && eval "$command" >stdout.txt 2>stderr.txt)
    local status=$?
    if [ "$status" != 0 ] && [ "$status" != 1 ]; then
      echo "FAIL: $name ($side): exit status $status"; cat "$scratch/$name/$side/stderr.txt"; failed=1; return
    fi
    [ -n "${sed_stdout:-}" ] && sed -i "$sed_stdout" "$scratch/$name/$side/stdout.txt"
  done
  local files
  files=$(cd "$scratch/$name/a" && ls -A | wc -l)
  if ! diff -r "$scratch/$name/a" "$scratch/$name/b" >"$scratch/$name.diff"; then
    echo "FAIL: $name: the outputs differ"; head -40 "$scratch/$name.diff"; failed=1
  else
    echo "ok: $name ($files files identical)"
  fi
}

SMALL='cp $ROOT/tests/data/common/chain2-latency.xml $ROOT/tests/data/common/tiny.json .'
FIGURE8='cp $ROOT/tests/data/common/star3-figure8.xml $ROOT/tests/data/common/figure8.json .'
VGG='cp $ROOT/platforms/bapipe-4xv100-pcie3.xml $ROOT/models/pipedream/vgg16/partition-4-stages.json . && mkdir vgg16 && cp $ROOT/models/pipedream/vgg16/graph.txt vgg16/'
OUTPUTS='--csv timeline.csv --trace trace.json --svg timeline.svg --save-plan plan.json'

for network in simgrid analytic; do
  for schedule in gpipe 1f1b-sno 1f1b-so; do
    run="\$PIPEGRID simulate --platform chain2-latency.xml --profile tiny.json --network $network --schedule $schedule --micro-batches 3 $OUTPUTS --json"
    same "tiny-$schedule-$network" "$SMALL" "$run" "$run"
  done
  # Not flushed: PipeDream with a replicated stage, steady state over 10 mini-batches.
  run="\$PIPEGRID simulate --platform star3-figure8.xml --profile figure8.json --network $network --schedule pipedream --replicas 2,1 --mini-batches 10 $OUTPUTS --json"
  same "figure8-pipedream-$network" "$FIGURE8" "$run" "$run"
  run="\$PIPEGRID simulate --platform bapipe-4xv100-pcie3.xml --profile vgg16/graph.txt --partition partition-4-stages.json --network $network --schedule 1f1b-sno --micro-batches 6 $OUTPUTS"
  same "vgg16-1f1b-sno-$network" "$VGG" "$run" "$run"
done
# A saved plan re-run gives the same again.
same "plan-rerun" "$SMALL && \$PIPEGRID simulate --platform chain2-latency.xml --profile tiny.json --schedule pipedream --save-plan saved.json >/dev/null" \
  "\$PIPEGRID simulate --plan saved.json $OUTPUTS --json" "\$PIPEGRID simulate --plan saved.json $OUTPUTS --json"

# explore: the same ranking, verdicts and winner's plan whatever the number
# of worker processes (and so whatever order the candidates finish in).
for network in simgrid analytic; do
  explore="\$PIPEGRID explore --platform chain2-latency.xml --profile tiny.json --mini-batch-size 16 --network $network --save-plan best.json"
  same "explore-json-$network" "$SMALL" "$explore --json --jobs 1" "$explore --json --jobs 2"
  # The text names the number of workers on one line: that line is masked.
  sed_stdout='s/ candidates simulated, [0-9]* at a time$/ candidates simulated, N at a time/' \
    same "explore-text-$network" "$SMALL" "$explore --jobs 1" "$explore --jobs 2"
done
explore="\$PIPEGRID explore --platform star3-figure8.xml --profile figure8.json --mini-batch-size 8 --network analytic --json"
same "explore-figure8" "$FIGURE8" "$explore --jobs 1" "$explore --jobs 2"

echo "$cases cases"
exit $failed
