#!/usr/bin/env bash
# Regenerates docs/configuration.md's copy of harness.toml (its header is
# kept); orchestrator/tests/docs.rs fails until the two agree.
set -euo pipefail
cd "$(dirname "$0")/.."
head=$(sed -n '1,/^```toml$/p' docs/configuration.md)
{ printf '%s\n' "$head"; cat harness.toml; printf '```\n'; } > docs/configuration.md.tmp
mv docs/configuration.md.tmp docs/configuration.md
