#!/usr/bin/env bash
# The emulated meter's own benchmarks, in emulated instructions (see
# docs/emulated-meter.md). Each writes its compare --json documents under
# benchmarks/runs/emulated-<UTC time>/ with the command that made them.
#
#   benchmarks/emulated.sh table     the study's table: the control, vanilla,
#                                    each of the playbook's six published
#                                    changes alone on vanilla, and the six
#                                    stacked in the order the study found them
#   benchmarks/emulated.sh aa [N]    N A/A compares of the vanilla treatment
#                                    (default 20); every guest is seeded
#                                    apart, so no two samples are repeats
#   benchmarks/emulated.sh planted   10 compares of the fixture server with
#                                    a busy-wait of 1% of its cost against
#                                    none
#   benchmarks/emulated.sh live [N]  the live regime's precision: the
#                                    fixture server's cost per loop
#                                    iteration, then N A/A compares of it
#                                    and N with a counting loop of 1% of
#                                    its cost planted (default 5 each),
#                                    each compare's wall time recorded;
#                                    NOHZ_FULL=1: with emulator.nohz_full
#   benchmarks/emulated.sh keepalive the worked example of
#                                    docs/your-server.md (C++, keep-alive,
#                                    IPv6): the server as it is against each
#                                    of its playbook's entries alone, and
#                                    all of them applied in order
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: benchmarks/emulated.sh table|aa [N]|planted|live [N]|keepalive}
out=benchmarks/runs/emulated-$(date -u +%Y%m%dT%H%M%SZ)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
echo "$0 $*  (main at $(git rev-parse --short HEAD))" > "$out/command.txt"

source benchmarks/lib.sh

case $what in
table)
  arms=(treatment control)
  for c in "${six[@]}"; do arms+=("$(server_with "$c")"); done
  for k in 2 3 4 5 6; do arms+=("$(server_with "${six[@]:0:$k}")"); done
  printf '%s\n' "${arms[@]}" > "$out/arms.txt"
  $R compare --meter emulated --json "${arms[@]}" > "$out/table.json"
  ;;
aa)
  for i in $(seq -w 1 "${2:-20}"); do
    $R compare --meter emulated --json --seed "$i" treatment treatment > "$out/aa-$i.json"
  done
  ;;
planted)
  fixture=$(build_fixture "$work")
  arm() { echo "cmd:$fixture --mode spin --spin-ns $1"; }
  $R compare --meter emulated --json "$(arm 0)" "$(arm 0)" > "$out/planted-base.json"
  base=$(python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['arms'][0]['cost_per_connection']['median']))" "$out/planted-base.json")
  # Under icount one guest ns is one instruction of the whole guest: the
  # spin's cost on the server's vCPU is measured, not assumed.
  p1=$((base / 100))
  echo "fixture base cost $base instructions; planted spin $p1 ns" | tee "$out/planted-sizes.txt"
  for i in $(seq -w 1 10); do
    $R compare --meter emulated --json --seed "$i" "$(arm 0)" "$(arm $p1)" > "$out/planted-$i.json"
  done
  ;;
live)
  fixture=$(build_fixture "$work")
  arm() { echo "cmd:$fixture --mode loop --loop $1"; }
  live="$work/harness.toml"
  python3 - harness.toml "$live" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
head, rest = text.split("[emulator]", 1)
rest = re.sub(r'(?m)^regime = "[a-z]+"', 'regime = "live"', rest, count=1)
if __import__("os").environ.get("NOHZ_FULL") == "1":
    rest = re.sub(r'(?m)^nohz_full = false', 'nohz_full = true', rest, count=1)
# Paths in harness.toml are from its own directory: keep the root's.
text = head + "[emulator]" + rest
text = text.replace('root = "."', 'root = "' + __import__("os").getcwd() + '"', 1)
open(sys.argv[2], "w").write(text)
PY
  cp "$live" "$out/harness.toml"
  L() { $R --config "$live" compare --meter emulated --json "$@"; }
  L "$(arm 0)" "$(arm 20000)" > "$out/calibrate.json"
  read -r base n1 < <(python3 - "$out/calibrate.json" <<'PY'
import json, sys
arms = json.load(open(sys.argv[1]))["arms"]
base, loaded = (a["cost_per_connection"]["median"] for a in arms)
per_iteration = (loaded - base) / 20000
print(int(base), round(base * 0.01 / per_iteration))
PY
)
  echo "fixture base cost $base instructions a connection; 1% planted as $n1 loop iterations" | tee "$out/planted-sizes.txt"
  for i in $(seq -w 1 "${2:-5}"); do
    for kind in aa planted; do
      n=0; [ "$kind" = planted ] && n=$n1
      start=$SECONDS
      L --seed "$i" "$(arm 0)" "$(arm "$n")" > "$out/$kind-$i.json"
      echo "$kind-$i $((SECONDS - start)) s" >> "$out/wall.txt"
    done
  done
  ;;
keepalive)
  example=examples/keepalive-cpp
  ids=(date-cache single-send-response accept4-nonblock accept-loop batch-responses)
  arms=(treatment)
  for id in "${ids[@]}"; do arms+=("$(server_with "$id")"); done
  arms+=("$(server_with "${ids[@]}" append-in-place)")
  printf '%s\n' "${arms[@]}" > "$out/arms.txt"
  $R --config "$example/harness.toml" compare --meter emulated --json "${arms[@]}" > "$out/keepalive.json"
  ;;
*) echo "unknown benchmark $what" >&2; exit 2 ;;
esac
echo "records in $out"
