#!/usr/bin/env bash
# The encoder benchmark on two revisions of bertfam, one after the other in one run, so a refactoring can be
# shown to keep the measured speed (ratios against transformers, which is the same in both runs).
#
#   bash benchmarks/compare_revisions.sh OLD_REV NEW_REV [encoder_throughput.py options]
#   bash benchmarks/compare_revisions.sh f8b0b07 HEAD --models bert-base --engines transformers,bertfam --no-memory
#
# Each revision is checked out into a temporary git worktree and runs its own benchmarks/encoder_throughput.py
# (which puts its own tree first on sys.path); the two tables are printed one after the other, OLD then NEW
# then OLD again, so drift in the machine's load shows up as a difference between the two OLD runs.
set -euo pipefail
OLD=$1; NEW=$2; shift 2
PY=${PY:-$(pwd)/.venv/bin/python}
TMP=$(mktemp -d)
trap 'git worktree remove --force "$TMP/old" 2>/dev/null; git worktree remove --force "$TMP/new" 2>/dev/null; rm -rf "$TMP"' EXIT
git worktree add -q --detach "$TMP/old" "$OLD"
git worktree add -q --detach "$TMP/new" "$NEW"
for run in old new old; do
  echo "=== $run ($(git -C "$TMP/$run" log --oneline -1 | cut -c1-60))"
  (cd "$TMP/$run" && "$PY" benchmarks/encoder_throughput.py --out-dir "$TMP/out-$run" "$@")
done
