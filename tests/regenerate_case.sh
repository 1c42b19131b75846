#!/usr/bin/env bash
# Rewrites the expected outputs of an end-to-end case (tests/run_case.sh's
# layout) from what the command prints now: expected_stdout and every
# expected.<file> the case already has. For a deliberate change only: review
# `git diff tests/data/<case>` before committing.
# Usage: tests/regenerate_case.sh build/pipegrid tests/data/<case> [...]
set -u
PIPEGRID=$(realpath "$1"); shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PIPEGRID ROOT
for dir in "$@"; do
  CASE=$(realpath "$dir"); export CASE
  work=$(mktemp -d)
  (cd "$work" && eval "$(cat "$CASE/args")" >"$work/.stdout" 2>/dev/null)
  [ -f "$CASE/expected_stdout" ] && cp "$work/.stdout" "$CASE/expected_stdout"
  for expected in "$CASE"/expected.*; do
    [ -e "$expected" ] || continue
    name=${expected##*/expected.}
    [ -f "$work/$name" ] && cp "$work/$name" "$expected"
  done
  rm -rf "$work"
done
