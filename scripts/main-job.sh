#!/usr/bin/env bash
# The main job: installs what is missing, builds ratchet, checks the machine,
# and runs a short optimization loop with the offline playbook agent on the
# default harness.toml. Extra arguments go to `ratchet run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release
./target/release/ratchet doctor
./target/release/ratchet run --max-iterations 3 "$@"
