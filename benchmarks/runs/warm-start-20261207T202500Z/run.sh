#!/usr/bin/env bash
# Cold boot (OLD: ratchet before the warm start) against warm start (NEW),
# alternated, host-timed, nothing else running. Usage: run.sh OLD NEW
set -euo pipefail
cd "$(dirname "$0")/../../.."
old=$1 new=$2 out=$(dirname "$0")
sed -e 's/^backlog = 256 /backlog = 32 /' -e 's/^batches = 4 /batches = 1 /' harness.toml > small.toml
trap 'rm -f small.toml' EXIT
for round in 1 2; do
  for which in old new; do
    bin=${!which}
    for cfg in harness.toml small.toml; do
      s=$(date +%s.%N)
      "$bin" compare --config $cfg --meter emulated --samples $([ $cfg = small.toml ] && echo 6 || echo 12) \
        --json treatment control > "$out/$which-$cfg-$round.json" 2>/dev/null
      e=$(date +%s.%N)
      echo "$round $which $cfg $(echo "$e - $s" | bc)" | tee -a "$out/wall.txt"
    done
  done
done
