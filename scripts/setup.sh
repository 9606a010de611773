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
need g++ g++          # the worked example (examples/keepalive-cpp) is C++
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

# The unprivileged user servers, builds and command agents run as (see
# orchestrator/src/bench/privilege.rs); without it ratchet uses nobody.
if [[ $(id -u) -eq 0 ]] && ! id ratchet-sut >/dev/null 2>&1; then
  if command -v useradd >/dev/null; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin ratchet-sut ||
      echo "setup: could not create user ratchet-sut; untrusted code will run as nobody" >&2
  else
    echo "setup: no useradd; untrusted code will run as nobody" >&2
  fi
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found: install a Rust toolchain (1.80 or newer), for example Debian's cargo package" >&2
  exit 1
fi

# Debian 12's backports suite, a package registry like the main one: QEMU,
# the guest kernel and libgit2 1.8 come from it. Added once, updated once.
backports_ready=0
backports() {
  ((backports_ready)) && return 0
  local mirror
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-backports main" \
      > /etc/apt/sources.list.d/ratchet-bookworm-backports.list
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || { echo "setup: apt-get update failed (bookworm-backports)"; return 1; }
  backports_ready=1
}

# The emulated meter (see docs/emulated-meter.md): QEMU 10 from
# bookworm-backports (7.2 from bookworm hangs a 2-vCPU guest under icount),
# a static busybox for the guest's userland, and Debian's kernel image from
# bookworm-backports (6.12: 6.1 holds a closed direct descriptor for a
# second), downloaded as a package and unpacked into EMULATOR_DIR, never
# installed.
EMULATOR_DIR=${RATCHET_EMULATOR_DIR:-/var/cache/ratchet/emulator}
emulator_ready() {
  command -v qemu-system-x86_64 >/dev/null 2>&1 &&
    qemu-system-x86_64 --version | grep -qE 'version (9\.[2-9]|[1-9][0-9])' &&
    [[ -x /bin/busybox ]] && [[ -s "$EMULATOR_DIR/vmlinuz" ]]
}
setup_emulator() {
  [[ $(id -u) -eq 0 ]] || { echo "setup: not root: the emulated meter is not set up (run this script as root)"; return 1; }
  command -v apt-get >/dev/null || { echo "setup: no apt-get: the emulated meter needs QEMU >= 9.2, busybox-static and a Debian kernel image"; return 1; }
  [[ $(uname -m) == x86_64 ]] || { echo "setup: the emulated meter runs x86_64 guests only"; return 1; }
  backports || { echo "setup: the emulated meter is not set up"; return 1; }
  apt-get install -y -qq -t bookworm-backports --no-install-recommends qemu-system-x86 >/dev/null ||
    { echo "setup: could not install qemu-system-x86 from bookworm-backports"; return 1; }
  apt-get install -y -qq busybox-static >/dev/null || { echo "setup: could not install busybox-static"; return 1; }
  local kpkg tmp
  kpkg=$(apt-cache depends -t bookworm-backports linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  [[ -n "$kpkg" ]] || { echo "setup: no linux-image-amd64 in bookworm-backports"; return 1; }
  mkdir -p "$EMULATOR_DIR"
  tmp=$(mktemp -d)
  chmod 755 "$tmp"  # apt-get download drops privileges to _apt
  (cd "$tmp" && apt-get download -qq -t bookworm-backports "$kpkg") ||
    { echo "setup: could not download $kpkg"; rm -rf "$tmp"; return 1; }
  dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp" ./boot
  cp "$tmp"/boot/vmlinuz-* "$EMULATOR_DIR/vmlinuz.new" && mv "$EMULATOR_DIR/vmlinuz.new" "$EMULATOR_DIR/vmlinuz"
  dpkg-deb -f "$tmp"/*.deb Package Version | awk '{print $2}' | paste -sd' ' > "$EMULATOR_DIR/kernel-package"
  rm -rf "$tmp"
}
if ! emulator_ready; then
  echo "setup: setting up the emulated meter in $EMULATOR_DIR"
  setup_emulator && emulator_ready ||
    echo "setup: the emulated meter is NOT available: ratchet measures in task-clock (ns) where no PMU exists"
fi

# libgit2 1.8, which the git2 crate links where pkg-config finds it; without
# it the build compiles the crate's bundled copy of libgit2 (the longest
# step of a cold build on two cores). Bookworm's own is 1.5, too old.
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null &&
   ! pkg-config --exists 'libgit2 >= 1.8.1' 'libgit2 < 1.9.0' 2>/dev/null; then
  { backports && apt-get install -y -qq -t bookworm-backports --no-install-recommends \
      libgit2-dev pkg-config >/dev/null; } ||
    echo "setup: libgit2 1.8 not installed: the build compiles its own copy (slower, same result)"
fi

# The meter counts syscalls through a tracepoint; tracefs must be mounted.
if [[ ! -e /sys/kernel/tracing/events/raw_syscalls ]] && [[ $(id -u) -eq 0 ]]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || \
    echo "setup: could not mount tracefs; syscalls per connection will be reported as unavailable"
fi
echo "setup: ready"
