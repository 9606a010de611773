# Helpers the benchmark scripts share; source it from the repository root.

# The ratchet binary every compare of one benchmark uses: RATCHET, or the
# release build. Copy it aside (RATCHET=/tmp/ratchet-<rev>) for a benchmark
# that spans an hour while the tree is rebuilt.
R=${RATCHET:-./target/release/ratchet}

# The arm of the working tree's treatment with the named playbook entries
# applied in order: ratchet applies and builds them as the loop does.
server_with() {
  local IFS=+
  echo "playbook:$*"
}

# The faulty fixture server, built into $1 by its own Makefile.
build_fixture() {
  # Servers run unprivileged: they must reach their binary (mktemp -d is 0700).
  chmod 755 "$1"
  make -s -C orchestrator/tests/fixtures OUT="$(cd "$1" && pwd)"
  echo "$1/faulty_server"
}

six=(ring-defer-taskrun multishot-accept direct-descriptors
     connection-freelist send-msg-more skip-success-send-close)
