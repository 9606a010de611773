#!/usr/bin/env bash
# Profiles of vanilla, MSG_MORE alone and all six changes in emulated
# instructions by function on the server's vCPU (live regime), one
# `ratchet profile` each. Run from the repository's root:
#   bash benchmarks/runs/<this directory>/run.sh <this directory>
set -euo pipefail
out=$1
six=playbook:ring-defer-taskrun+multishot-accept+direct-descriptors+connection-freelist+send-msg-more+skip-success-send-close
for arm in treatment playbook:send-msg-more "$six"; do
  case $arm in treatment) name=vanilla ;; playbook:send-msg-more) name=msg-more ;; *) name=all-six ;; esac
  ./target/release/ratchet profile --meter emulated --json "$arm" > "$out/$name.json"
done
