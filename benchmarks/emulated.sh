#!/usr/bin/env bash
# The emulated meter's own benchmarks, in emulated instructions (see
# docs/emulated-meter.md). Each writes its compare --json documents under
# benchmarks/records/emulated-<UTC time>/ with the command that made them.
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
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: benchmarks/emulated.sh table|aa [N]|planted}
R="./target/release/ratchet"
out=benchmarks/records/emulated-$(date -u +%Y%m%dT%H%M%SZ)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
echo "$0 $*  (main at $(git rev-parse --short HEAD))" > "$out/command.txt"

# treatment/server.c with the named playbook entries applied in order.
server_with() {
  local name=$1; shift
  mkdir -p "$work/$name"
  python3 - "$work/$name/server.c" "$@" <<'PY'
import sys, tomllib
src = open("treatment/server.c").read()
for name in sys.argv[2:]:
    entry = tomllib.load(open(f"knowledge-base/playbook/{name}.toml", "rb"))
    for e in entry["edits"]:
        if src.count(e["search"]) != 1:
            sys.exit(f"{name} does not apply here: {e['search'][:60]!r}")
        src = src.replace(e["search"], e["replace"])
open(sys.argv[1], "w").write(src)
PY
  cc -O2 -Wall -Wextra -Werror -o "$work/$name/server" "$work/$name/server.c" -luring
  echo "cmd:$work/$name/server"
}

six=(01-ring-defer-taskrun 02-multishot-accept 03-direct-descriptors
     04-connection-freelist 05-send-msg-more 06-skip-success-send-close)

case $what in
table)
  arms=(treatment control)
  for c in "${six[@]}"; do arms+=("$(server_with "alone-$c" "$c")"); done
  for k in 2 3 4 5 6; do arms+=("$(server_with "first-$k" "${six[@]:0:$k}")"); done
  printf '%s\n' "${arms[@]}" > "$out/arms.txt"
  $R compare --meter emulated --json "${arms[@]}" > "$out/table.json"
  ;;
aa)
  for i in $(seq -w 1 "${2:-20}"); do
    $R compare --meter emulated --json --seed "$i" treatment treatment > "$out/aa-$i.json"
  done
  ;;
planted)
  fixture=$work/faulty_server
  cc -O2 -Wall -Wextra -Werror -pthread -o "$fixture" orchestrator/tests/fixtures/faulty_server.c -luring
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
*) echo "unknown benchmark $what" >&2; exit 2 ;;
esac
echo "records in $out"
