#!/usr/bin/env bash
# Installs the system packages ratchet needs when they are missing, and says
# clearly what it cannot do. Only Debian packages are downloaded.
# --with-chromium also installs headless Chromium, which the tests use to
# render `ratchet report`'s HTML and check that its charts are drawn.
set -euo pipefail

with_chromium=0
for arg in "$@"; do
  case "$arg" in
    --with-chromium) with_chromium=1 ;;
    *) echo "setup: unknown option $arg (expected --with-chromium)" >&2; exit 2 ;;
  esac
done

missing=()
need() { # need <command-or-file> <package>
  if [[ "$1" == /* ]]; then [[ -e "$1" ]] || missing+=("$2")
  else command -v "$1" >/dev/null 2>&1 || missing+=("$2"); fi
}
need cc gcc
need make make
need /usr/include/liburing.h liburing-dev
need go golang-go
need perf linux-perf
need git git
if ((with_chromium)); then need chromium chromium; fi

if ((${#missing[@]})); then
  echo "setup: installing missing packages: ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: not root; run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null; then
    echo "setup: no apt-get on this machine; install these yourself: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || { echo "setup: apt-get update failed (no access to the package registry?)" >&2; exit 1; }
  apt-get install -y -qq "${missing[@]}" >/dev/null || {
    echo "setup: apt-get install ${missing[*]} failed" >&2; exit 1; }
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found: install a Rust toolchain (1.80 or newer), for example Debian's cargo package" >&2
  exit 1
fi

# The meter counts syscalls through a tracepoint; tracefs must be mounted.
if [[ ! -e /sys/kernel/tracing/events/raw_syscalls ]] && [[ $(id -u) -eq 0 ]]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || \
    echo "setup: could not mount tracefs; syscalls per connection will be reported as unavailable"
fi
echo "setup: ready"
