#!/bin/bash
# experiments/README.md lists every experiment file of experiments/ (issue
# 26): each .toml under the folder (inputs/ aside: inputs, not experiments),
# by its path relative to experiments/ in backquotes (`_base/exact.toml`).
# usage: check_experiments_readme.sh ROOT
set -u
ROOT=${1:?usage: check_experiments_readme.sh ROOT}
readme="$ROOT/experiments/README.md"
[ -f "$readme" ] || { echo "FAIL: no $readme"; exit 1; }
missing=0
while IFS= read -r file; do
  relative=${file#"$ROOT/experiments/"}
  if ! grep -qF "\`$relative\`" "$readme"; then
    echo "FAIL: experiments/$relative is not listed in experiments/README.md (add a line: \`$relative\` and what it does)"
    missing=$((missing + 1))
  fi
done < <(find "$ROOT/experiments" -name '*.toml' -not -path "$ROOT/experiments/inputs/*" | LC_ALL=C sort)
[ "$missing" -eq 0 ] && echo "ok: every experiment file is listed in experiments/README.md"
exit $((missing > 0))
