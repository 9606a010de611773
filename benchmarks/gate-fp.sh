#!/usr/bin/env bash
# The emulated gate's false positives: honest servers of several shapes,
# each measured against itself in N seeded compares of 12 blocks (24 trials
# a compare), and how much of their CPU time fell outside their windows,
# where `deferred_work` looks (it fails a trial above 2% of the time in
# them). Then the hostile servers it must still catch, once each.
#
#   benchmarks/gate-fp.sh [N] [SHAPE[:M]...]   N compares a shape (default
#                                              9: 216 trials), M for that
#                                              shape alone; shapes from
#                                              blocking epoll threads
#                                              treatment control (default all)
#
# Records under benchmarks/runs/gate-fp-<UTC time>/, summarized by
# benchmarks/gate_fp.py.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-9}
shift || true
shapes=("${@:-blocking epoll threads treatment control}")
read -r -a shapes <<< "${shapes[*]}"
out=benchmarks/runs/gate-fp-$(date -u +%Y%m%dT%H%M%SZ)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
echo "$0 $n ${shapes[*]}  (main at $(git rev-parse --short HEAD))" > "$out/command.txt"

source benchmarks/lib.sh
fixture=$(build_fixture "$work")
arm() {
  case $1 in
  blocking) echo "cmd:$fixture --mode ok" ;;
  epoll | threads) echo "cmd:$fixture --mode $1" ;;
  *) echo "$1" ;;
  esac
}
# Endurance is the keep's, not the gate's: off, so only trials are counted.
C() { $R --config "$work/harness.toml" compare --meter emulated --samples 12 --json "$@"; }
sed 's/^endurance_connections = .*/endurance_connections = 0/' harness.toml |
  sed "s|^root = \".\"|root = \"$(pwd)\"|" > "$work/harness.toml"
for spec in "${shapes[@]}"; do
  s=${spec%%:*}
  m=$n
  [[ $spec == *:* ]] && m=${spec#*:}
  for i in $(seq 1 "$m"); do
    C --seed "$i" "$(arm "$s")" "$(arm "$s")" > "$out/$s-$i.json" || true
  done
done
C "cmd:$fixture --mode defer_work --spin-us 500" "cmd:$fixture --mode restless" \
  > "$out/hostile.json" || true
python3 benchmarks/gate_fp.py "$out"
echo "records in $out"
