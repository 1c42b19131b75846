#!/usr/bin/env bash
# Rewrites the outputs that README.md and docs/*.md show from what their
# commands print now (tests/doc_test.sh --regenerate --long), after an
# intended change. Markers stay; blocks marked `skip (...)` are left as they
# are; a second run changes nothing. Read the diff before committing it: a
# figure that moved without a change meant to move it is a bug.
# usage: tests/regenerate_docs.sh [PIPEGRID]   (default: build/pipegrid)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PIPEGRID=${1:-$ROOT/build/pipegrid}
exec "$ROOT/tests/doc_test.sh" --regenerate --long "$PIPEGRID" "$ROOT"
