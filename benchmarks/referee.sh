#!/usr/bin/env bash
# The referee's benchmarks on this machine (issue: "the referee resolves 3%").
# Every figure is a ratio measured side by side in one `ratchet compare`;
# nothing here is timed in a test. Writes every JSON document to
# benchmarks/runs/<stamp>/ and prints the summary of summarize.py.
#
#   benchmarks/referee.sh [aa|planted|agreement|regime|schedules|inflight|manycore|all] [RUN_ID]
#
# aa         20 A/A compares of the vanilla treatment (13 windows each, the
#            loop's sample count at this machine's spread)
# planted    10 compares of the fixture server against copies 4% cheaper and
#            4% costlier, 3 against a copy 2% costlier (a busy-wait sized from
#            the fixture's own cost), all at default settings
# agreement  each kept change of RUN_ID (and its whole lineage) under the duet
#            and under 12 sequential blocks
# regime     the vanilla treatment, a server with the playbook's six
#            published changes applied in order, and the control: duet and
#            blocks at the default 256 connections in flight at each server,
#            the duet at 32, 128, 384 and 512, and the idle regime
# schedules  the same three arms, duet (12 windows) and blocks (6) alternated
#            in SCHEDULE_PAIRS pairs (default 6): the paired gap between the
#            schedules, free of the drift between measurements
# inflight   the same three arms at 32, 256 and 512 connections in flight at
#            each server, 12 windows each, in INFLIGHT_ROUNDS rounds (default
#            4) whose order rotates: the paired gaps against 256, free of the
#            drift between measurements
# manycore   what a machine whose generator saturates the SUT core by itself
#            gets: the fixture made slow (40 us of busy-wait per connection)
#            against a copy 10% dearer, with and without rationing, each
#            schedule, 12 samples
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
run=${2:-}
out=benchmarks/runs/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
cargo build --release -q

source benchmarks/lib.sh
fixture=$(build_fixture "$out")
arm() { echo "cmd:$(pwd)/$fixture --mode spin --spin-ns $1"; }

# The vanilla treatment, the peer (the treatment with the playbook's six
# published changes applied in order) and the control, as arms.
three_arms() {
  arms=(treatment "$(server_with "${six[@]}")" control)
}

if [[ $what == aa || $what == all ]]; then
  for i in $(seq -w 1 20); do
    $R compare treatment treatment --blocks 13 --json > "$out/aa-$i.json"
  done
fi

if [[ $what == planted || $what == all ]]; then
  # The fixture's own cost per connection sets the size of 4% and 2%.
  $R compare "$(arm 0)" "$(arm 0)" --blocks 6 --json > "$out/planted-base.json"
  base=$(python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['arms'][0]['cost_per_connection']['median']))" "$out/planted-base.json")
  p4=$((base * 4 / 100)); p2=$((base * 2 / 100))
  echo "fixture base cost ${base} ns; 4% = ${p4} ns, 2% = ${p2} ns" | tee "$out/planted-sizes.txt"
  for i in $(seq -w 1 10); do
    # baseline: a busy-wait of p4; arms: none (4% cheaper), 2 p4 (4% costlier)
    $R compare "$(arm $p4)" "$(arm 0)" "$(arm $((2 * p4)))" --json > "$out/planted-$i.json"
  done
  for i in 1 2 3; do
    $R compare "$(arm 0)" "$(arm $p2)" --json > "$out/planted2-$i.json"
  done
fi

if [[ $what == agreement || $what == all ]]; then
  [[ -n $run ]] || { echo "agreement needs a RUN_ID with a branch" >&2; exit 2; }
  base=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['base_commit'])" "results/$run/run.json")
  prev=$base
  for c in $(git rev-list --reverse "$base..ratchet/$run"); do
    n=$(git log -1 --format=%B "$c" | sed -n 's/^Ratchet-Attempt: //p')
    for s in duet blocks; do
      $R compare "rev:$prev" "rev:$c" --schedule $s --blocks 12 --json > "$out/agree-$n-$s.json"
    done
    prev=$c
  done
  for s in duet blocks; do
    $R compare "rev:$base" "rev:$prev" control --schedule $s --blocks 12 --json > "$out/agree-lineage-$s.json"
  done
fi
if [[ $what == regime || $what == all ]]; then
  three_arms
  $R compare "${arms[@]}" --blocks 12 --json > "$out/regime-duet-256.json"
  $R compare "${arms[@]}" --blocks 12 --schedule blocks --json > "$out/regime-blocks-256.json"
  for c in 32 128 384 512; do
    $R compare "${arms[@]}" --blocks 12 --connections $c --json > "$out/regime-duet-$c.json"
  done
  $R compare "${arms[@]}" --blocks 12 --regime idle --json > "$out/regime-idle-duet-256.json"
fi
if [[ $what == schedules || $what == all ]]; then
  # A ratio drifts between measurements more than its windows say
  # (docs/referee.md, "Intervals that hold at another time"), so one duet against one blocks run mostly
  # measures the minute. Pairs alternate which schedule goes first (ABBA), so
  # a steady drift lands on both alike; the summary takes the paired gaps.
  [[ -n ${arms[*]:-} ]] || three_arms
  for i in $(seq 1 "${SCHEDULE_PAIRS:-6}"); do
    order=(duet blocks); (( i % 2 == 0 )) && order=(blocks duet)
    for s in "${order[@]}"; do
      n=12; [[ $s == blocks ]] && n=6
      $R compare "${arms[@]}" --schedule $s --blocks $n --json > "$out/schedules-$i-$s.json"
    done
  done
fi
if [[ $what == inflight || $what == all ]]; then
  [[ -n ${arms[*]:-} ]] || three_arms
  counts=(32 256 512)
  for i in $(seq 1 "${INFLIGHT_ROUNDS:-4}"); do
    for k in 0 1 2; do
      c=${counts[$(( (i + k) % 3 ))]}
      $R compare "${arms[@]}" --blocks 12 --connections "$c" --json > "$out/inflight-$i-$c.json"
    done
  done
fi
if [[ $what == manycore || $what == all ]]; then
  slow=("$(arm 40000)" "$(arm 44000)")
  for s in duet blocks; do
    $R compare "${slow[@]}" --schedule $s --blocks 12 --json > "$out/manycore-saturated-$s.json"
    $R compare "${slow[@]}" --schedule $s --blocks 12 --regime idle --json > "$out/manycore-idle-$s.json"
  done
fi
# Binaries are rebuilt from source; only the records stay.
rm -f "$fixture"
python3 benchmarks/summarize.py "$out" | tee "$out/summary.txt"
