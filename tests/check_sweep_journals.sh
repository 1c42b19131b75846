#!/usr/bin/env bash
# Damaged sweep journals and results are reported, never absorbed (issue 25):
# a journal header that differs from the plan's columns (swapped, renamed,
# missing, extra), an unknown status, a negative or non-numeric metric, a
# stray quote in a middle row: exit 2 naming the journal, the line and the
# column, and no file changed; a torn last line: a warning, then cut and
# rerun; a run whose device rows were lost: a warning, counted as not run,
# rerun. Labels named like result columns are refused by `plan`; `report`
# refuses repeated rows and reads inf as a number.
# Usage: check_sweep_journals.sh PIPEGRID ROOT
set -u
PIPEGRID=$1 ROOT=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch" || exit 1
cp "$ROOT/tests/data/common/tiny.json" "$ROOT/tests/data/common/chain2-latency.xml" .
failed=0
fail() { echo "FAIL: $*"; failed=1; }
ok() { echo "ok: $*"; }

expect_status() {
  local name=$1 expected=$2
  shift 2
  "$@" >out.txt 2>err.txt
  local status=$?
  if [ "$status" = "$expected" ]; then ok "$name: exit $status"; else
    fail "$name: exit status $status, expected $expected"; cat out.txt err.txt
  fi
}
stderr_has() {
  if grep -qF -- "$2" err.txt; then ok "$1"; else fail "$1: stderr lacks: $2"; cat err.txt; fi
}

cat >exp.toml <<'EOF'
schema = 1
[defaults]
profile = "tiny.json"
platform = "chain2-latency.xml"
schedule = "gpipe"
network = "analytic"
[[axis]]
name = "micro_batches"
values = [1, 2, 4]
[[expect]]
where = "status == 'ok'"
assert = ["throughput_samples_per_s > 0"]
EOF
runs=out/shards/shard-0-of-1.csv devices=out/shards/devices-0-of-1.csv

fresh() { rm -rf out && "$PIPEGRID" sweep run exp.toml --out out --jobs 1 >/dev/null 2>&1 || fail "first run"; cp "$runs" runs.orig; }

# refused NAME SED-EXPRESSION FILE MESSAGE: the edited journal makes run,
# status and merge exit 2 with MESSAGE, and run leaves the journal as it was.
refused() {
  fresh
  sed -i "$2" "$3"
  cp "$3" edited
  for command in "sweep run exp.toml --out out --jobs 1" "sweep status out" "sweep merge out"; do
    # shellcheck disable=SC2086
    expect_status "$1: ${command%% *} ${command#* }" 2 "$PIPEGRID" $command
    stderr_has "$1: ${command#sweep }" "$4"
  done
  cmp -s "$3" edited && ok "$1: journal unchanged" || fail "$1: the journal was changed"
}

refused "swapped metric columns" '1s/minibatch_time_s,steady_period_s/steady_period_s,minibatch_time_s/' "$runs" \
  "$runs:1: header column 11 is 'steady_period_s', expected 'minibatch_time_s'"
refused "renamed metric column" '1s/throughput_samples_per_s/tput/' "$runs" "$runs:1: header column 13 is 'tput', expected 'throughput_samples_per_s'"
refused "extra column" '1s/$/,extra/' "$runs" "$runs:1: header column 31 'extra' is one too many"
refused "missing column" '1s/,pipegrid_version$//' "$runs" "$runs:1: the header ends after 29 columns, before column 30 'pipegrid_version'"
refused "devices header" '1s/busy_s/idle_s/' "$devices" "$devices:1: header column 5 is 'idle_s', expected 'busy_s'"
refused "unknown status" '3s/,ok,,/,bogus,,/' "$runs" \
  "$runs:3: status 'bogus' is not one of ok, oom, infeasible, error, timeout, crashed"
refused "negative metric" '2s/,ok,,[^,]*,/,ok,,-11,/' "$runs" \
  "$runs:2: minibatch_time_s: expected a number that is not negative (or nothing), found '-11'"
refused "text in a metric" '2s/,ok,,[^,]*,/,ok,,fast,/' "$runs" "$runs:2: minibatch_time_s: expected a number"
refused "stray quote in a middle row" '2s/,ok,,/,"ok,,/' "$runs" "$runs:2: unterminated quoted field"

# A plan whose columns changed (a --set of a new key) is refused, not appended.
fresh
expect_status "another plan's journal" 2 "$PIPEGRID" sweep run exp.toml --out out --jobs 1 --set memory=16GB
stderr_has "another plan's journal names the column" "$runs:1: header column 9 is 'status', expected 'memory'"
cmp -s "$runs" runs.orig && ok "another plan's journal unchanged" || fail "another plan's journal was changed"

# nan and inf are numbers (the spellings runs.csv uses).
fresh
sed -i '2s/,ok,,[^,]*,/,ok,,inf,/' "$runs"
sed -i '3s/,ok,,[^,]*,/,ok,,nan,/' "$runs"
expect_status "inf in a metric" 0 "$PIPEGRID" sweep status out

# A torn last line (no line break): a warning, cut off, that run again.
fresh
head -c -20 runs.orig >"$runs"
expect_status "torn last line: status" 0 "$PIPEGRID" sweep status out
stderr_has "torn last line: status warns" "pipegrid: warning: $runs:4: a torn last line"
grep -q "not run *1$" out.txt && ok "torn run counts as not run" || { fail "torn run"; cat out.txt; }
expect_status "torn last line: run" 0 "$PIPEGRID" sweep run exp.toml --out out --jobs 1
stderr_has "torn last line: run warns" "$runs:4: a torn last line"
stderr_has "torn last line: run reruns it" "2 of 3 runs already have a row"
[ -z "$(tail -c1 "$runs")" ] && [ "$(wc -l <"$runs")" = 4 ] && ok "torn line cut, run again" || fail "torn line: $(cat "$runs")"

# Device rows lost: reported, counted as not run, and rerun.
fresh
cp out/devices.csv devices.orig
sed -i '2,3d' "$devices"
expect_status "lost device rows: merge" 1 "$PIPEGRID" sweep merge out
stderr_has "lost device rows: merge warns" "1 run recorded as simulated has no device rows"
stderr_has "lost device rows: merge names the run" "(M=1, in $runs)"
expect_status "lost device rows: status" 0 "$PIPEGRID" sweep status out
grep -q "not run *1$" out.txt && ok "lost device rows: not run" || { fail "lost device rows: status"; cat out.txt; }
expect_status "lost device rows: run" 0 "$PIPEGRID" sweep run exp.toml --out out --jobs 1
stderr_has "lost device rows: run warns" "recorded as simulated has no device rows"
stderr_has "lost device rows: run reruns it" "2 of 3 runs already have a row"
cmp -s out/devices.csv devices.orig && ok "devices.csv whole again" || fail "devices.csv: $(cat out/devices.csv)"
rm -f "$devices"
expect_status "devices journal removed: run" 0 "$PIPEGRID" sweep run exp.toml --out out --jobs 1
stderr_has "devices journal removed: 3 runs rerun" "3 runs recorded as simulated have no device rows"
cmp -s out/devices.csv devices.orig && ok "devices.csv whole again" || fail "devices.csv: $(cat out/devices.csv)"

# report: a repeated row is refused; inf is a number in an expect.
fresh
sed -n 2p out/runs.csv >>out/runs.csv
expect_status "report: repeated row" 2 "$PIPEGRID" sweep report exp.toml --out out
stderr_has "report: repeated row names both lines" "out/runs.csv:5: run_index 0 (run_key $(sed -n 2p out/runs.csv | cut -d, -f1)) has a row already, at line 2"
sed -i '$d' out/runs.csv
sed -i '2s/,ok,,\([^,]*\),\([^,]*\),[^,]*,/,ok,,\1,\2,inf,/' out/runs.csv
grep -q ',ok,,[^,]*,[^,]*,inf,' out/runs.csv || fail "report: no inf cell written"
expect_status "report: inf is a number" 0 "$PIPEGRID" sweep report exp.toml --out out
grep -q "2 checked, 0 broken" out.txt && ok "report: inf > 0 holds" || { fail "report: inf"; cat out.txt err.txt; }

# Labels named like a result column: refused by plan, run and slurm.
for label in status run_key shard throughput_samples_per_s busy_s; do
  sed "1a labels = [\"$label\"]" exp.toml >label.toml
  expect_status "label '$label': plan" 2 "$PIPEGRID" sweep plan label.toml
  stderr_has "label '$label' named" "label.toml:2: labels: '$label' is a column of the results"
done
expect_status "reserved label: run" 2 "$PIPEGRID" sweep run label.toml --out label-out
[ ! -e label-out/shards ] && ok "reserved label: nothing run" || fail "reserved label: journals written"

exit $failed
