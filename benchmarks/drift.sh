#!/usr/bin/env bash
# Whether the time meter's intervals hold beyond the minute they were
# measured in: N compares of one pair (vanilla against the six published
# changes stacked) under task-clock at the defaults, one every PERIOD
# seconds, each written to benchmarks/runs/drift-<UTC time>/ with its
# start time. benchmarks/coverage.py then reports how often each compare's
# interval covers the other compares' medians.
#
#   benchmarks/drift.sh [N] [PERIOD]    default 12 compares, 300 s apart
#
# HOST_LOCK names a file each compare holds an flock(1) on, so that builds
# run under the same lock never overlap a compare.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-12}
period=${2:-300}
out=benchmarks/runs/drift-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
source benchmarks/lib.sh
echo "$0 $*  (main at $(git rev-parse --short HEAD), ratchet $R)" > "$out/command.txt"
six_stack=$(server_with "${six[@]}")
lock=${HOST_LOCK:-/dev/null}
for i in $(seq -w 1 "$n"); do
  t0=$(date +%s)
  date -u +%Y-%m-%dT%H:%M:%SZ > "$out/drift-$i.start"
  flock "$lock" "$R" compare --meter task-clock --json --seed "$i" treatment "$six_stack" \
    > "$out/drift-$i.json" 2> "$out/drift-$i.err" || echo "compare $i failed" >&2
  if [ "$i" != "$n" ]; then sleep $(( period - ($(date +%s) - t0) > 0 ? period - ($(date +%s) - t0) : 0 )); fi
done
echo "records in $out"
