#!/usr/bin/env bash
# The doc test's own checks (issue 26), on a scratch Markdown file: a shown
# figure that differs fails (exit 1) and names the line; --regenerate writes
# what the command prints, keeps the markers, leaves a `skip` block as it is,
# and a second run changes nothing; a `long` block runs only with --long; an
# unknown marker is exit 2.
# usage: check_doc_test.sh PIPEGRID ROOT
set -u
PIPEGRID=$1 ROOT=$2
doc_test="$ROOT/tests/doc_test.sh"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

mkdir -p "$scratch/docs"
cat >"$scratch/docs/example.md" <<'DOC'
Shown with a wrong figure:

```console
$ pipegrid schedule --schedule gpipe --stages 2 --micro-batches 2 > program.txt
$ cat program.txt
# pipegrid program: 2 stages, 3 micro-batches, 1 mini-batches
device 0 stage 0 replica 0 stream 0: 0F0 0F1 0B0 0B1
device 1 stage 1 replica 0 stream 0: 1F0 1F1 1B0 1B1
```

<!-- doc-test: skip (measured) -->
```console
$ pipegrid schedule --schedule gpipe --stages 2 --micro-batches 2
a measured figure: 1.5 s
```

<!-- doc-test: long -->
```console
$ pipegrid schedule --schedule gpipe --stages 1 --micro-batches 1 | head -n 1
# a slow one
```
DOC
cp "$scratch/docs/example.md" "$scratch/original.md"

"$doc_test" "$PIPEGRID" "$scratch" docs/example.md >"$scratch/out" 2>&1
status=$?
[ "$status" -eq 1 ] || fail "a wrong figure: expected exit status 1, found $status"
grep -q '^docs/example.md:5: the output shown differs' "$scratch/out" || fail "the report does not name docs/example.md:5"
grep -q '^  +# pipegrid program: 2 stages, 2 micro-batches, 1 mini-batches' "$scratch/out" || fail "the report lacks the printed line"
grep -q '1 commands run\|2 commands run' "$scratch/out" || fail "the summary does not count the commands"
cmp -s "$scratch/docs/example.md" "$scratch/original.md" || fail "a check rewrote the file"

"$doc_test" --long "$PIPEGRID" "$scratch" docs/example.md >"$scratch/out" 2>&1
status=$?
[ "$status" -eq 1 ] || fail "--long: expected exit status 1, found $status"
grep -q '^docs/example.md:19: ' "$scratch/out" || fail "--long did not run and compare the long block"

"$doc_test" --regenerate --long "$PIPEGRID" "$scratch" docs/example.md >/dev/null 2>&1 || fail "--regenerate failed"
cp "$scratch/docs/example.md" "$scratch/first.md"
grep -q '^# pipegrid program: 2 stages, 2 micro-batches, 1 mini-batches$' "$scratch/first.md" || fail "--regenerate did not write the printed figure"
grep -q '^a measured figure: 1.5 s$' "$scratch/first.md" || fail "--regenerate changed a skipped block"
grep -q '^<!-- doc-test: skip (measured) -->$' "$scratch/first.md" || fail "--regenerate dropped the skip marker"
grep -q '^<!-- doc-test: long -->$' "$scratch/first.md" || fail "--regenerate dropped the long marker"
grep -q '^# a slow one$' "$scratch/first.md" && fail "--regenerate --long left the long block's old output"
"$doc_test" --regenerate --long "$PIPEGRID" "$scratch" docs/example.md >/dev/null 2>&1 || fail "the second --regenerate failed"
cmp -s "$scratch/docs/example.md" "$scratch/first.md" || fail "a second --regenerate changed the file"
"$doc_test" --long "$PIPEGRID" "$scratch" docs/example.md >/dev/null 2>&1 || fail "the regenerated file does not pass"

printf '%s\n' '<!-- doc-test: sometimes -->' '```console' '$ true' '```' >"$scratch/docs/bad.md"
"$doc_test" "$PIPEGRID" "$scratch" docs/bad.md >"$scratch/out" 2>&1
status=$?
[ "$status" -eq 2 ] || fail "an unknown marker: expected exit status 2, found $status"
grep -q "unknown doc-test marker 'sometimes'" "$scratch/out" || fail "an unknown marker is not named"

[ "$failed" -eq 0 ] && echo "ok: the doc test compares, regenerates and keeps its markers"
exit "$failed"
