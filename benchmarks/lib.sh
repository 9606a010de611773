# Helpers the benchmark scripts share; source it from the repository root.

# The ratchet binary every compare of one benchmark uses: RATCHET, or the
# release build. Copy it aside (RATCHET=/tmp/ratchet-<rev>) for a benchmark
# that spans an hour while the tree is rebuilt.
R=${RATCHET:-./target/release/ratchet}

# Builds treatment/server.c with the named playbook entries applied in
# order under $work/<name>/, and prints the arm that runs it.
server_with() {
  local name=$1; shift
  # Servers run unprivileged: they must reach their binary (mktemp -d is 0700).
  chmod 755 "$work"
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

six=(ring-defer-taskrun multishot-accept direct-descriptors
     connection-freelist send-msg-more skip-success-send-close)
