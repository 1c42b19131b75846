#!/usr/bin/env bash
# Doc test (issue 26): runs the commands that README.md and docs/*.md show
# with their output, and compares what they print now with what is shown.
#
# usage: doc_test.sh [--regenerate] [--long] PIPEGRID ROOT [FILE...]
#   PIPEGRID  the built pipegrid executable
#   ROOT      the repository root; FILE is a Markdown file relative to it
#             (default: README.md and every docs/*.md)
#   --long    also run the blocks marked `long` (too slow for the fast suite)
#   --regenerate  rewrite the shown outputs from what the commands print now
#             (tests/regenerate_docs.sh runs this), instead of comparing
#
# A doc-test block is a fenced block whose first line starts with "$ ": each
# "$ " line is a shell command (a line ending in "\" continues on the next),
# and the lines after it, up to the next "$ " line or the fence, are exactly
# what it prints (stdout and stderr together; the exit status is not
# checked, so an error message can be shown). "pipegrid" and
# "./build/pipegrid" run PIPEGRID. The commands of one file run in order in
# one temporary folder that holds a link to every top-level entry of ROOT,
# so that inputs are named from the repository root while every file a
# command writes lands in the temporary folder; a later block may read what
# an earlier one wrote.
#
# A line "<!-- doc-test: MARKER -->" right before the opening fence sets:
#   skip (REASON)  never run nor compared (measured figures: times, runs on
#                  hardware CI lacks); left as it is by --regenerate
#   long           run only with --long (the CTest test labelled `long`)
#
# Exit status: 0 when every block that ran matches, 1 when one differs, 2 on
# a malformed block or bad usage.
set -u

regenerate=0 long=0
while [ $# -gt 0 ]; do
  case $1 in
    --regenerate) regenerate=1; shift ;;
    --long) long=1; shift ;;
    --) shift; break ;;
    -*) echo "doc_test.sh: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "usage: doc_test.sh [--regenerate] [--long] PIPEGRID ROOT [FILE...]" >&2; exit 2; }
PIPEGRID=$(realpath "$1") ROOT=$(realpath "$2")
shift 2
if [ $# -eq 0 ]; then
  set -- README.md
  for doc in "$ROOT"/docs/*.md; do set -- "$@" "docs/${doc##*/}"; done
fi
[ -x "$PIPEGRID" ] || { echo "doc_test.sh: $PIPEGRID is not an executable" >&2; exit 2; }

export LC_ALL=C TZ=UTC
unset PIPEGRID_FAULT_INJECT PIPEGRID_FAULT_MARKER

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/bin"
ln -s "$PIPEGRID" "$scratch/bin/pipegrid"
torch_sibling="$(dirname "$PIPEGRID")/pipegrid-torch"
[ -x "$torch_sibling" ] && ln -s "$torch_sibling" "$scratch/bin/pipegrid-torch"

# A folder that reads as the repository root: links to ROOT's entries, and a
# build/ holding only the executables.
make_work_folder() {
  local work=$1 entry name
  mkdir -p "$work/build"
  for entry in "$ROOT"/* "$ROOT"/.[!.]*; do
    [ -e "$entry" ] || continue
    name=${entry##*/}
    case $name in build|build-*|.git) continue ;; esac
    ln -s "$entry" "$work/$name"
  done
  ln -s "$scratch/bin/pipegrid" "$work/build/pipegrid"
  [ -e "$scratch/bin/pipegrid-torch" ] && ln -s "$scratch/bin/pipegrid-torch" "$work/build/pipegrid-torch"
}

# write_lines FILE LINE...: the lines, each ended by a newline (none: empty).
write_lines() {
  local target=$1
  shift
  if [ $# -eq 0 ]; then : >"$target"; else printf '%s\n' "$@" >"$target"; fi
}

failures=0 malformed=0 file_index=0
for file in "$@"; do
  path="$ROOT/$file"
  [ -f "$path" ] || { echo "doc_test.sh: no file $path" >&2; malformed=1; continue; }
  file_index=$((file_index + 1))
  work="$scratch/work$file_index"
  make_work_folder "$work"
  mapfile -t lines <"$path"
  output=()  # the file as --regenerate writes it
  ran=0 skipped=0 deferred=0 differing=0
  count=${#lines[@]} i=0
  while [ "$i" -lt "$count" ]; do
    line=${lines[i]}
    if [[ $line != '```'* ]] || [ $((i + 1)) -ge "$count" ] || [[ ${lines[i + 1]} != '$ '* ]]; then
      # Not a doc-test block: copied through, a fenced block whole.
      output+=("$line"); i=$((i + 1))
      if [[ $line == '```'* ]]; then
        while [ "$i" -lt "$count" ] && [[ ${lines[i]} != '```'* ]]; do output+=("${lines[i]}"); i=$((i + 1)); done
        [ "$i" -lt "$count" ] && { output+=("${lines[i]}"); i=$((i + 1)); }
      fi
      continue
    fi
    open=$i
    close=$((i + 1))
    while [ "$close" -lt "$count" ] && [[ ${lines[close]} != '```'* ]]; do close=$((close + 1)); done
    if [ "$close" -ge "$count" ]; then
      echo "$file:$((open + 1)): doc-test block without a closing fence" >&2; malformed=1; break
    fi
    marker=""
    if [ "$open" -gt 0 ] && [[ ${lines[open - 1]} =~ ^'<!-- doc-test: '(.*)' -->'$ ]]; then
      marker=${BASH_REMATCH[1]}
    fi
    mode=run
    case $marker in
      "") ;;
      long) [ "$long" -eq 1 ] || mode=defer ;;
      "skip ("*")") mode=skip ;;
      *) echo "$file:$open: unknown doc-test marker '$marker' (expected 'skip (REASON)' or 'long')" >&2
         malformed=1; mode=skip ;;
    esac
    output+=("${lines[open]}")
    j=$((open + 1))
    while [ "$j" -lt "$close" ]; do
      # One command: its "$ " line and continuations, then its output lines.
      command_start=$j
      command=${lines[j]#'$ '}
      command_lines=("${lines[j]}")
      while [[ ${lines[j]} == *'\' ]] && [ $((j + 1)) -lt "$close" ]; do
        j=$((j + 1)); command+=$'\n'${lines[j]}; command_lines+=("${lines[j]}")
      done
      j=$((j + 1))
      expected=()
      while [ "$j" -lt "$close" ] && [[ ${lines[j]} != '$ '* ]]; do expected+=("${lines[j]}"); j=$((j + 1)); done
      output+=("${command_lines[@]}")
      if [ "$mode" != run ]; then
        output+=("${expected[@]}")
        if [ "$mode" = skip ]; then skipped=$((skipped + 1)); else deferred=$((deferred + 1)); fi
        continue
      fi
      ran=$((ran + 1))
      (cd "$work" && PATH="$scratch/bin:$PATH" bash -c "$command") >"$scratch/actual" 2>&1 </dev/null
      mapfile -t actual <"$scratch/actual"
      output+=("${actual[@]}")
      write_lines "$scratch/printed" "${actual[@]}"
      write_lines "$scratch/shown" "${expected[@]}"
      if ! cmp -s "$scratch/shown" "$scratch/printed"; then
        differing=$((differing + 1))
        if [ "$regenerate" -eq 0 ]; then
          echo "$file:$((command_start + 1)): the output shown differs from what the command prints now:"
          printf '  %s\n' "${command_lines[@]}"
          diff -u --label shown --label printed "$scratch/shown" "$scratch/printed" | sed 's/^/  /'
        fi
      fi
    done
    output+=("${lines[close]}")
    i=$((close + 1))
  done
  summary="$file: $ran commands run, $skipped skipped, $deferred long (not run without --long)"
  if [ "$regenerate" -eq 1 ]; then
    write_lines "$scratch/regenerated" "${output[@]}"
    if cmp -s "$scratch/regenerated" "$path"; then
      echo "$summary; unchanged"
    else
      cat "$scratch/regenerated" >"$path"
      echo "$summary; rewritten ($differing outputs changed)"
    fi
  else
    echo "$summary; $differing differ"
    failures=$((failures + differing))
  fi
done
[ "$malformed" -eq 0 ] || exit 2
[ "$failures" -eq 0 ] || exit 1
exit 0
