#!/usr/bin/env bash
# Screened against one candidate at a time, in the same wall time: two runs
# of the offline playbook on the default harness.toml, one after the other
# in one clone of this repository, one with search.generation = 1 and one
# with search.generation = SIZE, each stopped by run.max_wall_minutes =
# MINUTES. Then the two champions and the start measured side by side.
# Writes benchmarks/runs/generation-<UTC time>/ with each run's output, its
# journal and the comparison.
#
#   benchmarks/generation.sh [MINUTES] [SIZE]     # defaults: 12 and 4
set -euo pipefail
minutes=${1:-12}
size=${2:-4}
root=$(cd "$(dirname "$0")/.." && pwd)
ratchet=$root/target/release/ratchet
[ -x "$ratchet" ] || { echo "build ratchet first: cargo build --release" >&2; exit 1; }
out=$root/benchmarks/runs/generation-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/repo"
cd "$work/repo"
ids=()
for g in 1 "$size"; do
    sed -i "s/^max_wall_minutes = [0-9]*/max_wall_minutes = $minutes/; s/^generation = [0-9]*/generation = $g/" harness.toml
    git -c user.name=bench -c user.email=bench@localhost commit -qam "generation $g, $minutes minutes"
    before=$(ls results)
    "$ratchet" --config harness.toml run >"$out/run-generation-$g.txt" 2>&1 || true
    id=$(comm -13 <(echo "$before") <(ls results) | head -1)
    [ -n "$id" ] || { echo "run with generation $g left no record; see $out/run-generation-$g.txt" >&2; exit 1; }
    ids+=("$id")
    cp -r "results/$id" "$out/generation-$g-$id"
done
"$ratchet" --config harness.toml compare treatment \
    "champion:${ids[0]}" "champion:${ids[1]}" --json >"$out/compare.json" 2>"$out/compare.stderr"
{
    echo "command: benchmarks/generation.sh $minutes $size"
    echo "commit: $(git -C "$root" rev-parse HEAD)"
    echo "runs: generation 1 = ${ids[0]}, generation $size = ${ids[1]}"
} >"$out/README.txt"
echo "$out"
