#!/usr/bin/env bash
# Runs the independent Chakra writer into a scratch folder and compares its
# files with the committed set, tests/data/chakra-external/. Exit 77 (skip)
# without /usr/bin/python3's protobuf module or protoc.
# Usage: check_chakra_external.sh SOURCE_DIR
set -euo pipefail
source_dir=$1
if ! command -v protoc >/dev/null || ! /usr/bin/python3 -c 'import google.protobuf' 2>/dev/null; then
  echo "skipped: needs protoc and python3-protobuf" >&2
  exit 77
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
/usr/bin/python3 "$source_dir/tests/scripts/write_chakra_traces.py" "$scratch/gpipe"
status=0
for file in gpipe.0.et gpipe.1.et gpipe.json; do
  if ! cmp "$scratch/$file" "$source_dir/tests/data/chakra-external/$file"; then
    echo "tests/data/chakra-external/$file differs from what tests/scripts/write_chakra_traces.py writes" >&2
    status=1
  fi
done
exit $status
