#!/usr/bin/env bash
# A terminated pipegrid takes its simulation children and its temporary files
# with it (core/termination.hpp). Usage: check_termination.sh PIPEGRID ROOT
#
# No timing is asserted: the test hook PIPEGRID_FAULT_INJECT=hold-simulation
# (or hold-after-temporaries) stops each simulation child (or the command,
# once its output temporaries are written) and appends its pid to the file
# PIPEGRID_FAULT_MARKER names; the signal is sent once that file has its
# lines. Polling loops only wait for a state, and fail after a generous guard.
set -u
PIPEGRID=$1 ROOT=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# Live (non-zombie) processes whose environment names this marker.
holders() {
  local marker=$1 environ pid
  for environ in /proc/[0-9]*/environ; do
    pid=${environ#/proc/}; pid=${pid%/environ}
    grep -qaF "PIPEGRID_FAULT_MARKER=$marker" "$environ" 2>/dev/null || continue
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] && continue
    echo "$pid"
  done
}

wait_for_lines() {  # FILE COUNT PID: until FILE has COUNT lines (PID must live)
  local guard=0
  while [ "$(cat "$1" 2>/dev/null | wc -l)" -lt "$2" ]; do
    kill -0 "$3" 2>/dev/null || { fail "pipegrid exited before reaching the hold point"; return 1; }
    guard=$((guard + 1)); [ $guard -gt 1200 ] && { fail "hold point never reached"; return 1; }
    sleep 0.05
  done
}

# scenario NAME SIGNAL HOLD LINES EXPECTED_STATUS -- pipegrid arguments...
# Runs pipegrid in $scratch/NAME/work with TMPDIR $scratch/NAME/tmp, sends
# SIGNAL once LINES processes hold, then checks: the exit status, no process
# of it left, no file left in TMPDIR or in the work folder (but the inputs).
scenario() {
  local name=$1 signal=$2 hold=$3 lines=$4 expected=$5
  shift 6
  local dir="$scratch/$name"
  mkdir -p "$dir/work" "$dir/tmp"
  cp "$ROOT/tests/data/common/chain2-latency.xml" "$ROOT/tests/data/common/tiny.json" "$dir/work/"
  # The plan's platform differs from the file: simulate --plan makes a
  # temporary copy of it (in TMPDIR).
  (cd "$dir/work" && "$PIPEGRID" simulate --platform chain2-latency.xml --profile tiny.json --schedule gpipe \
     --micro-batches 2 --network analytic --save-plan plan.json >/dev/null) || fail "$name: saving the plan failed"
  sed -i 's/100Bps/200Bps/' "$dir/work/chain2-latency.xml"
  local before
  before=$(ls -A "$dir/work")
  local marker="$dir/marker"
  set -m  # background jobs keep SIGINT (a non-interactive shell ignores it in them)
  (cd "$dir/work" && PIPEGRID_FAULT_INJECT=$hold PIPEGRID_FAULT_MARKER=$marker TMPDIR="$dir/tmp" \
     exec "$PIPEGRID" "$@" >"$dir/stdout" 2>"$dir/stderr") &
  local pid=$!
  set +m
  if wait_for_lines "$marker" "$lines" "$pid"; then
    # Each scenario must hold what it claims to clean up, or it proves nothing.
    case $name in
      simulate-term | simulate-int)
        [ -n "$(ls -A "$dir/tmp")" ] || fail "$name: no platform copy in TMPDIR while simulating";;
      outputs-term)
        ls "$dir/work" | grep -q '[.]tmp[.]' || fail "$name: no output temporaries while held";;
    esac
    kill -s "$signal" "$pid"
  else
    kill -s KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  local status=$?
  if [ "$signal" = KILL ]; then
    # The children die of PR_SET_PDEATHSIG; init reaps them in its own time.
    local guard=0
    while [ -n "$(holders "$marker")" ] && [ $guard -lt 600 ]; do sleep 0.05; guard=$((guard + 1)); done
  fi
  [ "$status" = "$expected" ] || fail "$name: exit status $status, expected $expected"
  local left
  left=$(holders "$marker")
  [ -z "$left" ] && while read -r held; do
    [ -n "$held" ] && kill -0 "$held" 2>/dev/null && [ "$signal" != KILL ] && left="$left $held (zombie)"
  done <"$marker"
  [ -z "$left" ] || { fail "$name: processes left: $left"; ps -o pid,ppid,stat,cmd -p "${left%% *}" 2>/dev/null; }
  [ "$signal" = KILL ] && return  # SIGKILL cannot clean up; only the children are checked
  [ -z "$(ls -A "$dir/tmp")" ] || fail "$name: temporary files left: $(ls -A "$dir/tmp")"
  [ "$(ls -A "$dir/work")" = "$before" ] || fail "$name: files left in the work folder: $(ls -A "$dir/work" | tr '\n' ' ')"
}

scenario simulate-term TERM hold-simulation 1 143 -- simulate --plan plan.json --csv out.csv --svg out.svg
scenario simulate-int INT hold-simulation 1 130 -- simulate --plan plan.json --csv out.csv --svg out.svg
scenario outputs-term TERM hold-after-temporaries 1 143 -- simulate --platform chain2-latency.xml --profile tiny.json \
  --schedule gpipe --micro-batches 2 --csv out.csv --svg out.svg --trace out.json
scenario explore TERM hold-simulation 2 143 -- explore --platform chain2-latency.xml --profile tiny.json \
  --mini-batch-size 16 --network analytic --jobs 2 --save-plan best.json
scenario simulate-kill KILL hold-simulation 1 137 -- simulate --plan plan.json --csv out.csv
exit $failed
