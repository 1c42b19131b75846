#!/bin/sh
# simulate's progress line (docs/performance.md, Scale): on a terminal (a pty
# made by script(1)) the output, with every progress update "\r...\033[K"
# removed, is the output of the same run into a pipe, which carries no
# escape at all; a run long enough to show updates shows them and erases
# the last one. Usage: check_progress.sh PIPEGRID ROOT
set -eu
PIPEGRID=$1
ROOT=$2
command -v script >/dev/null || { echo "script(1) not installed: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PIPEGRID" platform cluster --servers 1 --gpus-per-server 2 --device V100 --memory 32GiB --intra 150GBps,2us \
  --inter 25Gbps,5us --output "$work/p.xml" >/dev/null
cat >"$work/profile.json" <<'JSON'
{"name": "two", "micro_batch_size": 1, "input_bytes": 1000, "layers": [
  {"name": "a", "forward_s": 0.001, "backward_s": 0.002, "output_bytes": 1000, "parameter_bytes": 1000},
  {"name": "b", "forward_s": 0.001, "backward_s": 0.002, "output_bytes": 1000, "parameter_bytes": 1000}]}
JSON
args="simulate --platform $work/p.xml --profile $work/profile.json --schedule 1f1b-sno --micro-batches 40000 --network analytic"
"$PIPEGRID" $args >"$work/pipe.txt" 2>"$work/pipe.err"
if grep -q "$(printf '\033')" "$work/pipe.txt" "$work/pipe.err"; then echo "escape sequence in a pipe"; exit 1; fi
# script copies the pty (stdout and stderr together) to its own stdout.
script -qec "\"$PIPEGRID\" $args" /dev/null >"$work/tty.raw" </dev/null
# Drop the updates (\r ... ESC[K) and the pty's \r\n line ends.
python3 - "$work/tty.raw" "$work/tty.txt" <<'PY'
import re, sys
raw = open(sys.argv[1], 'rb').read()
updates = re.findall(rb'\r[^\r\n]*\x1b\[K', raw)
clean = re.sub(rb'\r[^\r\n]*\x1b\[K', b'', raw).replace(b'\r\n', b'\n')
open(sys.argv[2], 'wb').write(clean)
shown = [u for u in updates if b'simulating:' in u]
print(f"{len(shown)} progress updates, {len(updates) - len(shown)} erases")
if shown and updates[-1] != b'\r\x1b[K': sys.exit("the last progress line was not erased")
PY
cat "$work/pipe.err" "$work/pipe.txt" >"$work/expected.txt"
diff "$work/expected.txt" "$work/tty.txt"
