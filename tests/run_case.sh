#!/usr/bin/env bash
# Runs one end-to-end case (SimGrid's tesh habit): tests/data/<case>/args is
# a command line (pipegrid is $PIPEGRID, the case folder $CASE, the repo
# $ROOT), run in a fresh empty folder. Then:
#   expected_status           exit status (default 0)
#   expected_stdout           stdout, compared exactly
#   expected.<file>           <file> written by the command, compared exactly
#   expected_stderr_contains  lines that must each appear in stderr
# A failing command (status != 0) must leave no file behind.
set -u
PIPEGRID=$1 CASE=$2 ROOT=$3
export PIPEGRID CASE ROOT
# The command runs in $work (which must hold only what it writes); its
# stdout and stderr go to a separate private folder.
work=$(mktemp -d) logs=$(mktemp -d)
trap 'rm -rf "$work" "$logs"' EXIT
out="$logs/stdout" err="$logs/stderr"
cd "$work" || exit 1
eval "$(cat "$CASE/args")" >"$out" 2>"$err"
status=$?
failed=0
expected_status=0
[ -f "$CASE/expected_status" ] && expected_status=$(cat "$CASE/expected_status")
if [ "$status" != "$expected_status" ]; then
  echo "exit status: expected $expected_status, found $status"; failed=1
fi
if [ -f "$CASE/expected_stdout" ] && ! diff -u "$CASE/expected_stdout" "$out"; then
  echo "stdout differs from $CASE/expected_stdout"; failed=1
fi
for expected in "$CASE"/expected.*; do
  [ -e "$expected" ] || continue
  name=${expected##*/expected.}
  if [ ! -f "$work/$name" ]; then echo "missing output $name"; failed=1; continue; fi
  if ! diff -u "$expected" "$work/$name"; then echo "$name differs from $expected"; failed=1; fi
done
if [ -f "$CASE/expected_stderr_contains" ]; then
  while IFS= read -r line; do
    [ -z "$line" ] && continue
    grep -qF -- "$line" "$err" || { echo "stderr lacks: $line"; failed=1; }
  done <"$CASE/expected_stderr_contains"
fi
if [ "$status" != 0 ] && [ -n "$(ls -A "$work")" ]; then
  echo "a failed command left files behind:"; ls -A "$work"; failed=1
fi
if [ "$failed" != 0 ]; then
  echo "--- stderr ---"; cat "$err"; echo "--- stdout ---"; head -50 "$out"
fi
exit $failed
