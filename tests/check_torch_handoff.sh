#!/usr/bin/env bash
# pipegrid never loads LibTorch; its LibTorch commands are handed to
# pipegrid-torch next to it (cli/torch_forward.hpp) with the same command
# line, so the user sees one program. Usage: check_torch_handoff.sh PIPEGRID PIPEGRID_TORCH
set -u
PIPEGRID=$1 PIPEGRID_TORCH=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# Runs BINARY with argv[0] "pipegrid" (help names the program as typed);
# stdout, stderr and the status into scratch/NAME.{out,err,status}.
run_as_pipegrid() {
  local name=$1 binary=$2
  shift 2
  (exec -a pipegrid "$binary" "$@") >"$scratch/$name.out" 2>"$scratch/$name.err"
  echo $? >"$scratch/$name.status"
}
# The same outputs and status from pipegrid and from pipegrid-torch itself.
same_as_torch() {
  run_as_pipegrid handed "$PIPEGRID" "$@"
  run_as_pipegrid torch "$PIPEGRID_TORCH" "$@"
  local part
  for part in out err status; do
    cmp -s "$scratch/handed.$part" "$scratch/torch.$part" || { fail "pipegrid $*: its $part differs from pipegrid-torch's"; diff "$scratch/handed.$part" "$scratch/torch.$part" | head -5; }
  done
}

# No LibTorch in pipegrid's process, not even for --help.
if LD_DEBUG=libs "$PIPEGRID" --help 2>&1 >/dev/null | grep -q 'libtorch'; then fail "pipegrid --help loads LibTorch"; fi
# The LibTorch commands are listed, then answered by pipegrid-torch.
same_as_torch --help
grep -q '^  execute' "$scratch/handed.out" || fail "pipegrid --help does not list execute"
same_as_torch execute --help
same_as_torch --help calibrate
same_as_torch calibrate --model mlp
same_as_torch execute --model mlp --schedule gpipe --bogus 1
same_as_torch __rank
[ "$(cat "$scratch/handed.status")" = 2 ] || fail "pipegrid __rank: expected exit status 2, found $(cat "$scratch/handed.status")"
# Commands without LibTorch are pipegrid's own, with the same answers.
same_as_torch schedule --schedule gpipe --stages 2 --micro-batches 2

# Without pipegrid-torch next to it: a clear error, exit 3.
cp "$PIPEGRID" "$scratch/pipegrid"
"$scratch/pipegrid" execute --help >"$scratch/alone.out" 2>"$scratch/alone.err"
status=$?
[ "$status" = 3 ] || fail "pipegrid execute without pipegrid-torch: expected exit status 3, found $status"
grep -q "pipegrid: error: cannot run $scratch/pipegrid-torch" "$scratch/alone.err" || { fail "pipegrid execute without pipegrid-torch: unexpected message"; cat "$scratch/alone.err"; }
[ -s "$scratch/alone.out" ] && fail "pipegrid execute without pipegrid-torch printed on stdout"

[ $failed = 0 ] && echo "ok"
exit $failed
