#!/usr/bin/env bash
# End-to-end tests of `pipegrid sweep` (EXPERIMENTS.md): goldens, resume
# after SIGKILL and torn journal lines, shards and their merge (--shard
# auto under Slurm and Open MPI variables, and under a real mpirun), the
# statuses of runs and the exit statuses of the commands.
# Usage: check_sweep.sh PIPEGRID ROOT SCENARIO
#   SCENARIO: golden | resume | shards | mpirun | statuses | slurm
# Inputs and goldens: tests/data/sweep-e2e/ (a sweep of 18 runs of a few ms
# each: ok, oom and infeasible rows) and tests/data/sweep-statuses/.
# Goldens of runs.csv leave out the volatile columns (sim_wall_s, shard,
# finished_at, pipegrid_version: the last four). Exit 77: skipped.
# No timing is asserted: the kill waits for a fault-injection hold point,
# and --timeout is 1 s against a run of several seconds.
set -u
PIPEGRID=$1 ROOT=$2 SCENARIO=$3
E2E=$ROOT/tests/data/sweep-e2e
STATUSES=$ROOT/tests/data/sweep-statuses
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch" || exit 1
failed=0
fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok: $*"; }

# runs.csv without its volatile columns (the last four; none holds a comma).
stable() { sed -E 's/(,[^,]*){4}$//' "$1"; }

# same_as NAME EXPECTED ACTUAL: the files are equal (diff shown otherwise).
same_as() {
  if diff -u "$2" "$3" >"$scratch/diff.txt" 2>&1; then ok "$1"; else fail "$1"; head -40 "$scratch/diff.txt"; fi
}

# check_results NAME DIR: DIR's runs.csv (stable part) and devices.csv equal
# the goldens of the uninterrupted, unsharded sweep.
check_results() {
  if [ ! -f "$2/runs.csv" ]; then fail "$1: no runs.csv in $2"; return; fi
  stable "$2/runs.csv" >"$scratch/stable.csv"
  same_as "$1: runs.csv" "$E2E/expected-runs.csv" "$scratch/stable.csv"
  same_as "$1: devices.csv" "$E2E/expected-devices.csv" "$2/devices.csv"
}

# expect_status NAME EXPECTED COMMAND...: runs COMMAND (stdout and stderr to
# $scratch/out.txt and err.txt) and checks its exit status.
expect_status() {
  local name=$1 expected=$2
  shift 2
  "$@" >"$scratch/out.txt" 2>"$scratch/err.txt"
  local status=$?
  if [ "$status" = "$expected" ]; then ok "$name: exit $status"; else
    fail "$name: exit status $status, expected $expected"; cat "$scratch/err.txt"
  fi
}

# stderr_has NAME TEXT: $scratch/err.txt holds TEXT.
stderr_has() {
  if grep -qF -- "$2" "$scratch/err.txt"; then ok "$1"; else fail "$1: stderr lacks: $2"; cat "$scratch/err.txt"; fi
}

# column_of FILE NAME ROW: the cell of column NAME in data row ROW (1-based)
# of a runs.csv whose cells before NAME hold no quoted comma.
column_of() {
  local index
  index=$(head -1 "$1" | tr ',' '\n' | grep -nx -- "$2" | cut -d: -f1)
  sed -n "$(( $3 + 1 ))p" "$1" | cut -d, -f"$index"
}

case $SCENARIO in
golden)
  # plan: axes, counts per where rule, shard sizes.
  expect_status "plan" 0 "$PIPEGRID" sweep plan "$E2E/experiment.toml"
  same_as "plan output" "$E2E/expected-plan.txt" "$scratch/out.txt"
  expect_status "plan --where --shard" 0 "$PIPEGRID" sweep plan "$E2E/experiment.toml" --where "micro_batches <= 4" --shard 1/3 \
    --set network=analytic
  same_as "plan --where --shard output" "$E2E/expected-plan-where-shard.txt" "$scratch/out.txt"
  # run: every row; the summary line; the goldens.
  expect_status "run" 0 "$PIPEGRID" sweep run "$E2E/experiment.toml" --out out --jobs 2
  same_as "run output" "$E2E/expected-run.txt" "$scratch/out.txt"
  check_results "run" out
  [ "$(column_of out/runs.csv shard 1)" = "0/1" ] && ok "volatile column shard" || fail "shard cell: $(column_of out/runs.csv shard 1)"
  [ -n "$(column_of out/runs.csv pipegrid_version 1)" ] && ok "volatile column pipegrid_version" || fail "no pipegrid_version"
  [ -s out/manifest.json ] && ok "manifest.json written" || fail "no manifest.json"
  cp out/runs.csv first-runs.csv
  # status: counts by status.
  expect_status "status" 0 "$PIPEGRID" sweep status out
  same_as "status output" "$E2E/expected-status.txt" "$scratch/out.txt"
  # run again: everything resumed, nothing rerun, runs.csv byte for byte.
  expect_status "run again" 0 "$PIPEGRID" sweep run "$E2E/experiment.toml" --out out --jobs 2
  stderr_has "run again skips every run" "18 of 18 runs already have a row in out: skipped"
  same_as "run again: runs.csv unchanged (volatile columns included)" first-runs.csv out/runs.csv
  # --fresh: everything rerun, same stable results.
  expect_status "run --fresh" 0 "$PIPEGRID" sweep run "$E2E/experiment.toml" --out out --jobs 2 --fresh
  grep -q "already have a row" "$scratch/err.txt" && fail "--fresh resumed rows"
  check_results "run --fresh" out
  # report: its [[expect]] holds.
  expect_status "report" 0 "$PIPEGRID" sweep report "$E2E/experiment.toml" --out out
  # slurm: the sbatch script (absolute paths shown as ROOT/ and SCRATCH/).
  expect_status "slurm" 0 "$PIPEGRID" sweep slurm "$E2E/experiment.toml" --out "$scratch/results" --shards 4 --cpus 2 \
    --time 01:30:00 --set network=analytic
  sed -e "s|$ROOT/|ROOT/|g" -e "s|$scratch/|SCRATCH/|g" "$scratch/out.txt" >slurm.sh
  same_as "slurm script" "$E2E/expected-slurm.sh" slurm.sh
  [ -e "$scratch/results" ] && fail "slurm created its --out folder"
  expect_status "slurm --shards 0" 2 "$PIPEGRID" sweep slurm "$E2E/experiment.toml" --out r --shards 0
  ;;

slurm)
  # sweep slurm: what comes from the file or a flag is refused (control
  # characters, a bad --time, more tasks than runs) or quoted; the script,
  # run with a stand-in pipegrid that records its arguments, runs nothing else
  # and keeps every #SBATCH directive; run with the real pipegrid, task by
  # task and resubmitted tasks apart, it gives the golden results.
  mkdir bin work
  printf '%s\n' '#!/bin/bash' 'printf "%s\0" "$@" >"$RECORDED_ARGV"' >bin/pipegrid
  chmod +x bin/pipegrid
  common=$ROOT/tests/data/common
  # experiment FILE NAME_TOML: an experiment of 4 runs whose name key is NAME_TOML (none when empty).
  experiment() {
    { echo "schema = 1"; [ -n "$2" ] && echo "name = $2"
      printf '[defaults]\nprofile = "%s"\nplatform = "%s"\nschedule = "gpipe"\n' "$common/tiny.json" "$common/chain2-latency.xml"
      printf '[[axis]]\nname = "micro_batches"\nvalues = [1, 2, 3, 4]\n'; } >"$1"
  }
  # Refused, exit 2, no script: control characters in the name (the case
  # from the robustness campaign, a tab, DEL), in a path, in --time.
  experiment newline.toml '"evil\ntouch PWNED\n#"'
  expect_status "slurm, a newline in name" 2 "$PIPEGRID" sweep slurm newline.toml --out r --shards 2
  stderr_has "the name key is named with its line" "newline.toml:2: name: expected no control characters"
  stderr_has "the name is shown escaped" "found byte 0x0a in 'evil\x0Atouch PWNED\x0A#'"
  [ -s "$scratch/out.txt" ] && fail "a refused name printed a script"
  experiment tab.toml '"a\tb"'
  expect_status "slurm, a tab in name" 2 "$PIPEGRID" sweep slurm tab.toml --out r --shards 2
  experiment del.toml '"a\u007fb"'
  expect_status "slurm, DEL in name" 2 "$PIPEGRID" sweep slurm del.toml --out r --shards 2
  experiment $'line\nbreak.toml' ""
  expect_status "slurm, a newline in the file name (the name without a name key)" 2 "$PIPEGRID" sweep slurm $'line\nbreak.toml' \
    --out r --shards 2
  experiment ok.toml '"ok"'
  expect_status "slurm, a newline in --out" 2 "$PIPEGRID" sweep slurm ok.toml --out $'r\ntouch PWNED' --shards 2
  stderr_has "--out is named" "--out: expected no control characters"
  expect_status "slurm, a backslash in --out" 2 "$PIPEGRID" sweep slurm ok.toml --out 'r\s' --shards 2
  expect_status "slurm, a newline in --time" 2 "$PIPEGRID" sweep slurm ok.toml --out r --shards 2 --time $'1:00:00\necho injected'
  stderr_has "--time is shown escaped" "found '1:00:00\x0Aecho injected'"
  for time in 99:99:99 1:60 60:00:60 1-24 1-23:60 1-1:1:60 1:2:3:4 -1 1- :30 x '1:00:00 x' '' 123456789; do
    expect_status "slurm --time '$time'" 2 "$PIPEGRID" sweep slurm ok.toml --out r --shards 2 --time "$time"
  done
  stderr_has "--time states the rule" "--time: expected a Slurm time limit, MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
  for time in 90 90:30 48:00:00 0:59:59 2-0 2-23:59 2-23:59:59 UNLIMITED; do
    expect_status "slurm --time '$time'" 0 "$PIPEGRID" sweep slurm ok.toml --out r --shards 2 --time "$time"
  done
  expect_status "slurm, more tasks than runs" 2 "$PIPEGRID" sweep slurm ok.toml --out r --shards 5
  stderr_has "--shards names the runs" "--shards: expected at most 4 (the runs of ok.toml"
  expect_status "slurm --shards 1000000000" 2 "$PIPEGRID" sweep slurm ok.toml --out r --shards 1000000000
  stderr_has "--shards states the cap" "--shards: expected an integer from 1 to 1000000, found 1000000000"
  expect_status "slurm --cpus 0" 2 "$PIPEGRID" sweep slurm ok.toml --out r --shards 2 --cpus 0
  [ -e r ] && fail "slurm created its --out folder"

  # Accepted, quoted: shell and sbatch syntax in the name, the paths and --where.
  hostile=$'$(touch PWNED) `touch PWNED` "dq" \'sq\' ; touch PWNED # %A 50% &'  # no backslash: refused in --out
  mkdir "work/$hostile"
  file="$scratch/work/$hostile/exp.toml" out="$scratch/work/$hostile/out"
  experiment "$file" '"x $(touch PWNED) `touch PWNED` \"dq\" '"'sq'"' ; touch PWNED # %A 50% \\ &"'
  where="micro_batches >= 1 or '\$(touch PWNED) \`touch PWNED\` ; \" #' == ''"
  expect_status "slurm, hostile name, paths and --where" 0 "$PIPEGRID" sweep slurm "$file" --out "$out" --shards 4 --cpus 3 \
    --time 2-23:59:59 --where "$where"
  cp "$scratch/out.txt" job.sh
  bash -n job.sh && ok "the script parses" || fail "bash -n job.sh"
  name=$'x $(touch PWNED) `touch PWNED` "dq" \'sq\' ; touch PWNED # %A 50% \\ &'
  # sbatch_words MODE LINE: the arguments sbatch reads from an #SBATCH line,
  # one a line: blanks split, a backslash escapes, an unquoted '#' starts a
  # comment; MODE new: both quotes group; old (before Slurm 17.11): only '"'
  # groups, and '#' starts a comment even inside it.
  sbatch_words() {
    local mode=$1 line=${2#\#SBATCH} word="" quote="" escape=0 started=0 c i
    for ((i = 0; i < ${#line}; i++)); do
      c=${line:i:1}
      if ((escape)); then word+=$c; escape=0
      elif [[ $c == '\' ]]; then escape=1; started=1
      elif [[ -n $quote && $c == "$quote" ]]; then quote=""
      elif [[ $c == '#' && ( -z $quote || $mode == old ) ]]; then break
      elif [[ -n $quote ]]; then word+=$c
      elif [[ $c == '"' || ( $c == "'" && $mode == new ) ]]; then quote=$c; started=1
      elif [[ $c == ' ' || $c == $'\t' ]]; then ((started)) && printf '%s\n' "$word"; word="" started=0
      else word+=$c; started=1
      fi
    done
    [[ -n $quote ]] && echo "(unmatched $quote)"
    ((started)) && printf '%s\n' "$word"
  }
  log_pattern="${out//%/%%}/slurm-%A_%a.log"
  expected=("--job-name=pipegrid-$name" "--array=0-3" "--cpus-per-task=3" "--time=2-23:59:59" "--output=$log_pattern")
  directives=()
  while IFS= read -r line; do
    case $line in
    '#SBATCH'*) directives+=("$line") ;;
    '#'* | '') ;;
    *) break ;;  # sbatch reads no #SBATCH line past the first command
    esac
  done <job.sh
  [ "${#directives[@]}" = 5 ] && [ "$(grep -c '^#SBATCH' job.sh)" = 5 ] && ok "5 #SBATCH lines, all before the first command" ||
    { fail "#SBATCH lines: ${#directives[@]} before the first command"; cat job.sh; }
  for i in 0 1 2 3 4; do
    for mode in new old; do
      [ "$(sbatch_words $mode "${directives[i]}")" = "${expected[i]}" ] && ok "sbatch ($mode) reads ${expected[i]%%=*} intact" ||
        fail "sbatch ($mode) reads '$(sbatch_words $mode "${directives[i]}")' from '${directives[i]}', expected '${expected[i]}'"
    done
  done
  # Run it as task 2 of the array, then as a resubmitted task 3: the stand-in
  # gets exactly the arguments, and nothing else runs.
  for task in 2 3; do
    (cd work && env -u SLURM_CPUS_PER_TASK SLURM_ARRAY_TASK_ID=$task RECORDED_ARGV="$scratch/argv$task" PATH="$scratch/bin:$PATH" \
      bash ../job.sh) >"$scratch/out.txt" 2>"$scratch/err.txt" && ok "task $task ran" || { fail "task $task"; cat "$scratch/err.txt"; }
    mapfile -d '' -t argv <"$scratch/argv$task"
    want=(sweep run "$file" --out "$out" --shard "$task/4" --jobs 3 --where "$where")
    [ "${argv[*]@Q}" = "${want[*]@Q}" ] && ok "task $task: pipegrid got its arguments intact" ||
      fail "task $task: pipegrid got ${argv[*]@Q}, expected ${want[*]@Q}"
  done
  [ -n "$(find "$scratch" -name PWNED)" ] && fail "the script ran an injected command" || ok "no injected command ran"

  # The golden sweep through the script and the real pipegrid: tasks 0 and 2,
  # then 1 and 3 as a resubmission (sbatch --array=1,3 sets no MIN of 0).
  ln -s "$(command -v "$PIPEGRID")" bin/real-pipegrid
  printf '%s\n' '#!/bin/bash' 'exec "$(dirname "$0")/real-pipegrid" "$@"' >bin/pipegrid
  expect_status "slurm, the e2e sweep" 0 "$PIPEGRID" sweep slurm "$E2E/experiment.toml" --out "$scratch/results" --shards 4 --cpus 2
  cp "$scratch/out.txt" e2e.sh
  for task in 0 2 1 3; do
    min=$((task % 2))
    env SLURM_ARRAY_TASK_ID=$task SLURM_ARRAY_TASK_MIN=$min SLURM_ARRAY_TASK_MAX=$((min + 2)) SLURM_ARRAY_TASK_STEP=2 \
      SLURM_ARRAY_TASK_COUNT=2 PATH="$scratch/bin:$PATH" bash e2e.sh >"task$task.out" 2>"task$task.err" &&
      ok "e2e task $task" || { fail "e2e task $task"; cat "task$task.err"; }
  done
  grep -q "in shard 3/4" task3.out && ok "resubmitted task 3 ran shard 3/4" || { fail "task 3 output"; cat task3.out; }
  expect_status "merge the script's shards" 0 "$PIPEGRID" sweep merge "$scratch/results"
  check_results "sweep slurm script, tasks 0,2 then 1,3" "$scratch/results"
  ;;

resume)
  # SIGKILL of the parent once three rows are journalled (two runs may be in
  # flight with --jobs 2: they die with it), then the same command again.
  marker=$scratch/marker
  set -m
  (PIPEGRID_FAULT_INJECT=hold-sweep-after-3-rows PIPEGRID_FAULT_MARKER=$marker \
     exec "$PIPEGRID" sweep run "$E2E/experiment.toml" --out out --jobs 2 >stdout.txt 2>stderr.txt) &
  pid=$!
  set +m
  guard=0
  while [ ! -s "$marker" ]; do
    kill -0 "$pid" 2>/dev/null || { fail "resume: sweep run exited before its hold point"; cat stderr.txt; break; }
    guard=$((guard + 1)); [ $guard -gt 1200 ] && { fail "resume: hold point never reached"; break; }
    sleep 0.05
  done
  kill -s KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ -f out/runs.csv ] && fail "resume: a killed sweep wrote runs.csv"
  rows=$(($(wc -l <out/shards/shard-0-of-1.csv) - 1))
  [ "$rows" = 3 ] && ok "killed with 3 rows journalled" || fail "resume: $rows rows journalled, expected 3"
  expect_status "resume after SIGKILL" 0 "$PIPEGRID" sweep run "$E2E/experiment.toml" --out out --jobs 2
  stderr_has "resume skips the journalled runs" "3 of 18 runs already have a row in out: skipped"
  check_results "resume after SIGKILL" out

  # A run killed while writing its last device row: its device rows, the
  # last one torn (half a row, no line break), and no run row (moved to the
  # end of the run journal, torn too). Torn lines are cut off, the run's
  # whole device rows dropped, the run rerun.
  rm out/runs.csv out/devices.csv
  runs=out/shards/shard-0-of-1.csv devices=out/shards/devices-0-of-1.csv
  last=$(tail -1 "$devices") key=${last%%,*}
  row=$(grep "^$key," "$runs")
  grep -v "^$key," "$runs" >torn.csv && printf '%s' "${row:0:25}" >>torn.csv && mv torn.csv "$runs"
  head -n -1 "$devices" >torn.csv && printf '%s' "${last:0:25}" >>torn.csv && mv torn.csv "$devices"
  expect_status "status with a torn line" 0 "$PIPEGRID" sweep status out
  grep -q "not run *1$" "$scratch/out.txt" && ok "status counts the torn run as not run" || { fail "status: torn run"; cat "$scratch/out.txt"; }
  expect_status "resume after a torn line" 0 "$PIPEGRID" sweep run "$E2E/experiment.toml" --out out --jobs 1
  stderr_has "torn run rerun" "17 of 18 runs already have a row"
  check_results "resume after a torn line" out
  for journal in out/shards/shard-0-of-1.csv out/shards/devices-0-of-1.csv; do
    [ -z "$(tail -c1 "$journal")" ] && ok "$journal ends with a whole line" || fail "$journal: torn line left"
  done
  rows=$(($(wc -l <out/shards/shard-0-of-1.csv) - 1))
  [ "$rows" = 18 ] && ok "journal has 18 rows" || fail "journal has $rows rows, expected 18"

  # --retry-failed reruns only error/crashed/timeout rows: none here.
  expect_status "run --retry-failed" 0 "$PIPEGRID" sweep run "$E2E/experiment.toml" --out out --retry-failed
  stderr_has "--retry-failed keeps ok, oom and infeasible rows" "18 of 18 runs already have a row"
  ;;

shards)
  # Shards 0/3, 1/3, 2/3 (at once, into one folder), then merge.
  for i in 0 1 2; do
    "$PIPEGRID" sweep run "$E2E/experiment.toml" --out out --shard "$i/3" --jobs 1 >"shard$i.out" 2>"shard$i.err" &
    eval "pid$i=$!"
  done
  for i in 0 1 2; do
    eval "wait \$pid$i"
    status=$?
    [ "$status" = 0 ] && ok "shard $i/3" || { fail "shard $i/3: exit $status"; cat "shard$i.err"; }
  done
  [ -f out/runs.csv ] && fail "a sharded run wrote runs.csv"
  grep -q "6 runs in shard 1/3" shard1.out && ok "shard 1/3 ran 6 runs" || { fail "shard 1/3 output"; cat shard1.out; }
  expect_status "status before merge" 0 "$PIPEGRID" sweep status out
  grep -q "runs.csv: not yet (sweep merge)" "$scratch/out.txt" && ok "status: merge pending" || { fail "status"; cat "$scratch/out.txt"; }
  expect_status "merge" 0 "$PIPEGRID" sweep merge out
  check_results "shards 0/3 1/3 2/3 merged" out

  # A key recorded twice with the same results (volatile cells differ): fine.
  # With a different metric: merge refuses (exit 2) and names the key.
  cp -r out same && row=$(sed -n 2p same/shards/shard-0-of-3.csv)
  echo "${row%,*}" | sed -E 's/,[^,]*$/,1999-01-01T00:00:00Z,0.0.0/' >>same/shards/shard-1-of-3.csv
  expect_status "merge, a row twice with equal results" 0 "$PIPEGRID" sweep merge same
  cp -r out conflict
  key=${row%%,*}
  index=$(head -1 conflict/shards/shard-0-of-3.csv | tr ',' '\n' | grep -nx minibatch_time_s | cut -d: -f1)
  awk -F, -v OFS=, -v i="$index" 'NR == 2 { $i = $i + 1; print }' conflict/shards/shard-0-of-3.csv >>conflict/shards/shard-2-of-3.csv
  cp conflict/runs.csv before.csv
  expect_status "merge, one key with two results" 2 "$PIPEGRID" sweep merge conflict
  stderr_has "merge names the conflicting key" "$key"
  stderr_has "merge says why" "recorded with two different results"
  same_as "a refused merge leaves runs.csv" before.csv conflict/runs.csv
  expect_status "status, a conflict" 0 "$PIPEGRID" sweep status conflict
  grep -q "1 key(s) recorded with two different results" "$scratch/out.txt" && ok "status reports the conflict" || fail "status conflict"

  # A missing shard: merge exits 1 and lists the missing runs.
  mkdir missing && cp -r out/manifest.json out/shards missing/
  rm missing/shards/shard-2-of-3.csv
  expect_status "merge, shard 2/3 missing" 1 "$PIPEGRID" sweep merge missing
  stderr_has "merge counts the missing runs" "6 runs of the plan have no row yet:"
  stderr_has "merge lists a missing run" "chain3-fpga|GPipe|M=4"

  # --shard auto: Slurm array variables (a task's position in MIN-MAX:STEP),
  # then Open MPI's. --array=5-7, then --array=0-4:2 (tasks 0, 2, 4).
  for array in "slurm 5 7 1" "stepped 0 4 2"; do
    read -r dir min max step <<<"$array"
    for ((task = min; task <= max; task += step)); do
      env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u SLURM_PROCID -u SLURM_NTASKS \
        SLURM_ARRAY_TASK_ID=$task SLURM_ARRAY_TASK_MIN=$min SLURM_ARRAY_TASK_MAX=$max SLURM_ARRAY_TASK_STEP=$step \
        SLURM_ARRAY_TASK_COUNT=3 "$PIPEGRID" sweep run "$E2E/experiment.toml" --out "$dir" --shard auto --jobs 2 >/dev/null \
        2>"$dir$task.err" || { fail "--shard auto, Slurm task $task of $min-$max:$step"; cat "$dir$task.err"; }
    done
    [ "$(ls "$dir/shards" | tr '\n' ' ')" = "devices-0-of-3.csv devices-1-of-3.csv devices-2-of-3.csv shard-0-of-3.csv shard-1-of-3.csv shard-2-of-3.csv " ] &&
      ok "Slurm tasks $min-$max:$step ran shards 0-2 of 3" || fail "Slurm shards: $(ls "$dir/shards" | tr '\n' ' ')"
    expect_status "merge, Slurm shards of $min-$max:$step" 0 "$PIPEGRID" sweep merge "$dir"
    check_results "--shard auto under Slurm, $min-$max:$step" "$dir"
  done
  # An array given as a list (no position), a missing _MIN, a count past the cap.
  expect_status "--shard auto, Slurm list 1,2,9" 2 env SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=9 \
    SLURM_ARRAY_TASK_STEP=1 SLURM_ARRAY_TASK_COUNT=3 "$PIPEGRID" sweep run "$E2E/experiment.toml" --out none --shard auto
  stderr_has "a Slurm list is refused" "the Slurm array is not one range MIN-MAX:STEP of COUNT tasks"
  expect_status "--shard auto, no SLURM_ARRAY_TASK_MIN" 2 env -u SLURM_ARRAY_TASK_MIN SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=3 \
    "$PIPEGRID" sweep run "$E2E/experiment.toml" --out none --shard auto
  stderr_has "a missing _MIN is named" "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_MIN is not"
  expect_status "--shard auto, PMI_SIZE=2^31" 2 env -u SLURM_ARRAY_TASK_ID -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK PMI_RANK=0 \
    PMI_SIZE=2147483648 "$PIPEGRID" sweep run "$E2E/experiment.toml" --out none --shard auto
  stderr_has "PMI_SIZE is read without narrowing" "PMI_SIZE='2147483648': expected at most 1000000 shards"
  expect_status "--shard auto, OMPI_COMM_WORLD_SIZE=2^32+2" 2 env -u SLURM_ARRAY_TASK_ID -u SLURM_PROCID OMPI_COMM_WORLD_RANK=1 \
    OMPI_COMM_WORLD_SIZE=4294967298 "$PIPEGRID" sweep run "$E2E/experiment.toml" --out none --shard auto
  stderr_has "OMPI_COMM_WORLD_SIZE is read without narrowing" "OMPI_COMM_WORLD_SIZE='4294967298': expected at most 1000000 shards"
  expect_status "--shard 0/2000000" 2 "$PIPEGRID" sweep plan "$E2E/experiment.toml" --shard 0/2000000
  stderr_has "--shard states its cap" "--shard: expected at most 1000000 shards (N), found '0/2000000'"
  [ -e none ] && fail "a refused --shard auto created its --out folder"
  for rank in 0 1; do
    env -u SLURM_ARRAY_TASK_ID -u SLURM_PROCID OMPI_COMM_WORLD_RANK=$rank OMPI_COMM_WORLD_SIZE=2 \
      "$PIPEGRID" sweep run "$E2E/experiment.toml" --out ompi --shard auto --jobs 2 >/dev/null 2>"ompi$rank.err" ||
      { fail "--shard auto, Open MPI rank $rank"; cat "ompi$rank.err"; }
  done
  expect_status "merge, Open MPI ranks" 0 "$PIPEGRID" sweep merge ompi
  check_results "--shard auto under Open MPI variables" ompi
  expect_status "--shard auto without launcher variables" 2 env -u SLURM_ARRAY_TASK_ID -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK \
    -u PMI_RANK "$PIPEGRID" sweep run "$E2E/experiment.toml" --out none --shard auto
  stderr_has "--shard auto names the variables" "no launcher variables found"
  [ -e none ] && fail "a refused --shard auto created its --out folder"
  ;;

mpirun)
  if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found (Debian openmpi-bin)"; exit 77; fi
  expect_status "mpirun -n 2 ... --shard auto" 0 mpirun -n 2 --allow-run-as-root --oversubscribe \
    "$PIPEGRID" sweep run "$E2E/experiment.toml" --out out --shard auto --jobs 1
  grep -q "9 runs in shard 0/2" "$scratch/out.txt" && grep -q "9 runs in shard 1/2" "$scratch/out.txt" &&
    ok "rank 0 and rank 1 ran shards 0/2 and 1/2" || { fail "mpirun shards"; cat "$scratch/out.txt"; }
  expect_status "merge after mpirun" 0 "$PIPEGRID" sweep merge out
  check_results "mpirun -n 2" out
  ;;

statuses)
  # ok, oom, infeasible, error in one sweep: exit 1 (an error), a one-line reason.
  expect_status "run with an error row" 1 "$PIPEGRID" sweep run "$STATUSES/experiment.toml" --out out --where "case != 'slow'"
  stderr_has "the error's first line, as it happens" "pipegrid: run error ["
  stderr_has "the error's reason" "error: --schedule: unknown schedule 'no-such-schedule'"
  grep -q "ok 1, oom 1, infeasible 1, error 1" "$scratch/out.txt" && ok "run counts by status" || { fail "run summary"; cat "$scratch/out.txt"; }
  for case in ok oom infeasible error; do
    status=$(grep "^[0-9a-f]*,[0-9]*,$case," out/runs.csv | cut -d, -f13)
    [ "$status" = "$case" ] && ok "status $case" || fail "run $case: status '$status'"
  done
  [ "$(wc -l <out/runs.csv)" = 5 ] && ok "one line per row (one-line reasons)" || fail "runs.csv has $(wc -l <out/runs.csv) lines"
  # An out-of-memory run keeps its metrics.
  oom=$(grep "^[0-9a-f]*,[0-9]*,oom," out/runs.csv)
  [ "$(echo "$oom" | cut -d, -f13-24)" = "oom,gpu0 needs 1.084 KiB of 1 KiB,17.5,,0.9142857142857143,0.2857142857142857,25,1110,gpu0,1024,2,0-1:1|2-3:1" ] &&
    ok "oom row keeps its metrics" || fail "oom row: $oom"
  grep -q "needs 930 B on gpu0 (stage 0), which has 800 B" out/runs.csv && ok "infeasible reason" || fail "infeasible reason"
  # Resumed: the error row stays (exit 1 still); --retry-failed reruns it only.
  expect_status "run again (the error stays)" 1 "$PIPEGRID" sweep run "$STATUSES/experiment.toml" --out out --where "case != 'slow'"
  stderr_has "nothing rerun" "4 of 4 runs already have a row"
  expect_status "run --retry-failed" 1 "$PIPEGRID" sweep run "$STATUSES/experiment.toml" --out out --where "case != 'slow'" --retry-failed
  stderr_has "--retry-failed reruns the error only" "3 of 4 runs already have a row"
  # report: its [[expect]] breaks on purpose.
  expect_status "report, a broken expect" 1 "$PIPEGRID" sweep report "$STATUSES/experiment.toml" --where "case != 'slow'" --out out
  stderr_has "report names the broken expect" "expect broken"
  # --timeout: a run of several seconds against 1 s.
  expect_status "run --timeout 1" 1 "$PIPEGRID" sweep run "$STATUSES/experiment.toml" --out slow --where "case == 'slow'" --timeout 1
  grep -q ",timeout,killed after --timeout 1 s," slow/runs.csv && ok "status timeout" || { fail "timeout row"; cat slow/runs.csv; }

  # Bad files and options: exit 2, FILE:LINE, nothing written.
  expect_status "plan, a typo" 2 "$PIPEGRID" sweep plan "$STATUSES/typo.toml"
  stderr_has "plan names FILE:LINE and suggests" "pipegrid: error: $STATUSES/typo.toml:7: unknown key 'netwrok' (did you mean 'network'?)"
  expect_status "run, a typo" 2 "$PIPEGRID" sweep run "$STATUSES/typo.toml" --out typo
  [ -e typo ] && fail "run of a bad file created its --out folder"
  expect_status "run, bad --shard" 2 "$PIPEGRID" sweep run "$STATUSES/experiment.toml" --out bad --shard 3/3
  expect_status "run, --jobs 0" 2 "$PIPEGRID" sweep run "$STATUSES/experiment.toml" --out bad --jobs 0
  stderr_has "--jobs 0 states the rule" "--jobs: expected an integer >= 1 (leave it out for every core), found 0"
  expect_status "run, --jobs -3" 2 "$PIPEGRID" sweep run "$STATUSES/experiment.toml" --out bad --jobs -3
  for timeout in -1 0 nan inf -inf 1e300; do
    expect_status "run, --timeout $timeout" 2 "$PIPEGRID" sweep run "$STATUSES/experiment.toml" --out bad --timeout "$timeout"
    stderr_has "--timeout $timeout states the rule" "--timeout: expected a positive finite number of seconds"
  done
  expect_status "run, bad --set" 2 "$PIPEGRID" sweep run "$STATUSES/experiment.toml" --out bad --set micro_batches=two
  expect_status "run, unknown --set key" 2 "$PIPEGRID" sweep run "$STATUSES/experiment.toml" --out bad --set netwrok=x
  expect_status "run, no such file" 2 "$PIPEGRID" sweep run "$STATUSES/none.toml" --out bad
  [ -e bad ] && fail "a refused run created its --out folder"
  expect_status "plan, no such file" 2 "$PIPEGRID" sweep plan "$STATUSES/none.toml"
  expect_status "merge, not a results folder" 2 "$PIPEGRID" sweep merge "$scratch"
  expect_status "status, not a results folder" 2 "$PIPEGRID" sweep status "$scratch"
  expect_status "show, no such run" 2 "$PIPEGRID" sweep show out --run no-such-run
  expect_status "report, bad where" 2 "$PIPEGRID" sweep report "$STATUSES/experiment.toml" --out out --where "case =="
  ;;

*)
  echo "usage: check_sweep.sh PIPEGRID ROOT golden|resume|shards|mpirun|statuses|slurm"; exit 2;;
esac
exit $failed
