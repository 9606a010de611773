#!/usr/bin/env bash
# The treatment's servers measured with a real HTTP client this project did
# not write: ApacheBench (`ab`, Debian's apache2-utils), one connection per
# request, no keep-alive. Reports core 1's busy time per connection, from
# /proc/stat, as ratios to vanilla taken within each round.
#
#   benchmarks/realclient.sh [options] [ARM...]
#
# ARMs are ratchet's arm specs (treatment, control, rev:<rev>,
# playbook:<id>[+<id>...]); the first is the reference. Default: vanilla
# (treatment), each of the six published changes alone, the first four
# together, all six together. Every binary is built by ratchet, never here.
#
# Options:
#   --rounds R        rounds (default 5); each runs every arm once, in a fresh
#                     order shuffled from the seed and the round
#   --requests N      measured requests per run (default 30000)
#   --warmup W        warm-up requests before each measured run (default 2000)
#   --concurrency C   ab -c (default 128)
#   --seed S          the shuffles' seed (default 1)
#   --capped [PCT]    each server in a cgroup with a CPU quota of PCT% of a
#                     core (default 10): v1 cpu.cfs_quota_us, or cgroup2 cpu.max
#   --binaries-from M how to get ratchet's builds: build (`ratchet build --json
#                     ARM...`), check (`ratchet check` of each arm into a
#                     private build cache, then the cache entry its manifest
#                     vouches for), or auto (default: build if this ratchet
#                     has it, else check)
#   --port-base P     servers listen on 127.0.0.1:P.. (default 20000), a new
#                     port every run
#   --ab-timeout S    seconds one ab run may take before it is killed and the
#                     run failed (default 300)
#   --lock-wait S     how long to wait for another ratchet to release core 1
#                     (default 3600)
#   --out DIR         the record (default benchmarks/runs/realclient-<UTC time>)
#
# Needs root (cgroups; servers dropped to the user ratchet-sut), 2 cores:
# servers on core 1, ab on core 0. RATCHET names the ratchet binary (as
# benchmarks/lib.sh). It holds ratchet's lock of core 1 while measuring, so
# no ratchet measures there at the same time; HOST_LOCK, when set, names a
# file it also holds an flock(1) on (as benchmarks/drift.sh).
set -euo pipefail
umask 022
cd "$(dirname "$0")/.."
orig_args=("$@")
# shellcheck source=benchmarks/lib.sh
source benchmarks/lib.sh

die() { echo "realclient.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

rounds=5 requests=30000 warmup=2000 concurrency=128 seed=1
capped=0 quota_pct=10 from=auto port_base=20000 ab_timeout=300 lock_wait=3600 out=""
sut_core=1 load_core=0 sut_user=ratchet-sut

while (($#)); do
  case $1 in
    --rounds) rounds=${2:?--rounds R}; shift 2 ;;
    --requests) requests=${2:?--requests N}; shift 2 ;;
    --warmup) warmup=${2:?--warmup W}; shift 2 ;;
    --concurrency) concurrency=${2:?--concurrency C}; shift 2 ;;
    --seed) seed=${2:?--seed S}; shift 2 ;;
    --capped)
      capped=1; shift
      if (($#)) && [[ $1 =~ ^[0-9]+$ ]]; then quota_pct=$1; shift; fi ;;
    --binaries-from) from=${2:?--binaries-from build|check|auto}; shift 2 ;;
    --port-base) port_base=${2:?--port-base P}; shift 2 ;;
    --ab-timeout) ab_timeout=${2:?--ab-timeout S}; shift 2 ;;
    --lock-wait) lock_wait=${2:?--lock-wait S}; shift 2 ;;
    --out) out=${2:?--out DIR}; shift 2 ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) die "unknown option $1 (--help)" ;;
    *) break ;;
  esac
done

int_in() {
  if ! [[ $2 =~ ^[1-9][0-9]{0,11}$|^0$ ]] || (($2 < $3 || $2 > $4)); then
    die "$1 must be an integer from $3 to $4, got '$2'"
  fi
}
int_in --rounds "$rounds" 1 100
int_in --requests "$requests" 100 10000000
int_in --warmup "$warmup" 0 10000000
int_in --concurrency "$concurrency" 1 20000
int_in --seed "$seed" 0 999999999
int_in --capped "$quota_pct" 1 100
int_in --port-base "$port_base" 1024 64000
int_in --ab-timeout "$ab_timeout" 10 86400
int_in --lock-wait "$lock_wait" 0 86400
((concurrency <= requests)) || die "--concurrency must not exceed --requests"
((warmup == 0 || concurrency <= warmup)) || die "--warmup must be 0 or at least --concurrency"
case $from in auto|build|check) ;; *) die "--binaries-from must be build, check or auto" ;; esac

arms=("$@")
if ((${#arms[@]} == 0)); then
  arms=(treatment)
  for c in "${six[@]}"; do arms+=("$(server_with "$c")"); done
  arms+=("$(server_with "${six[@]:0:4}")" "$(server_with "${six[@]}")")
fi
declare -A seen=()
for a in "${arms[@]}"; do
  [[ $a == cmd:* ]] && die "$a: a cmd: arm is not a ratchet build"
  [[ $a =~ ^[A-Za-z0-9:+._/~^-]+$ ]] || die "arm '$a': unexpected characters"
  [[ -z ${seen[$a]:-} ]] || die "arm $a given twice"
  seen[$a]=1
done
name_of() {
  case $1 in
    treatment) echo vanilla ;;
    "$(server_with "${six[@]:0:4}")") echo "first four" ;;
    "$(server_with "${six[@]}")") echo "all six" ;;
    playbook:*) echo "${1#playbook:}" ;;
    *) echo "$1" ;;
  esac
}

# What this needs, checked before anything is built or started.
(($(id -u) == 0)) || die "run as root: servers run as $sut_user in cgroups of their own"
for t in ab taskset setpriv ss flock python3 timeout sha256sum getconf install; do
  command -v "$t" >/dev/null || die "$t not found (ab: apt-get install apache2-utils)"
done
id "$sut_user" >/dev/null 2>&1 || die "no user $sut_user (scripts/setup.sh makes it)"
grep -q "^cpu$sut_core " /proc/stat || die "no core $sut_core: this needs 2 cores"
[ -x "$R" ] || die "no ratchet binary at $R (RATCHET names another)"
clk_tck=$(getconf CLK_TCK)

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${out:-benchmarks/runs/realclient-$stamp}
[ -e "$out" ] && die "$out exists"
work=$(mktemp -d)
chmod 755 "$work"   # servers run unprivileged: they must reach their binary

server_pid="" ab_pid="" cgroups=() lockfd="" hostfd="" record_made=0
stop_server() {
  local i
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  for ((i = 0; i < 40; i++)); do alive "$server_pid" || break; sleep 0.05; done
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
# Whatever is left in the servers' cgroups, killed (cgroup2's cgroup.kill).
kill_groups() {
  local g p
  for g in "${cgroups[@]}"; do
    if [ -e "$g/cgroup.kill" ]; then echo 1 > "$g/cgroup.kill" || true
    elif [ -e "$g/cgroup.procs" ]; then
      while read -r p; do kill -KILL "$p" 2>/dev/null || true; done < "$g/cgroup.procs"
    fi
  done
}
cleanup() {
  local rc=$? g i left
  trap - EXIT INT TERM
  if [ -n "$ab_pid" ]; then kill -TERM "$ab_pid" 2>/dev/null || true; wait "$ab_pid" 2>/dev/null || true; fi
  stop_server
  kill_groups
  for ((i = 0; i < 20; i++)); do
    left=""
    for g in "${cgroups[@]}"; do left+=$(cat "$g/cgroup.procs" 2>/dev/null || true); done
    if [ -z "$left" ]; then break; fi
    sleep 0.05
  done
  for g in "${cgroups[@]}"; do
    rmdir "$g" 2>/dev/null || echo "realclient.sh: could not remove cgroup $g" >&2
  done
  rm -rf "$work"
  if ((rc != 0 && record_made)) && [ ! -e "$out/summary.md" ]; then
    echo "Incomplete: stopped with exit status $rc at $(date -u +%Y-%m-%dT%H:%M:%SZ), before its summary; runs.tsv holds the runs made until then." > "$out/INCOMPLETE"
    echo "realclient.sh: the record $out is incomplete" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A process that exists and is not a zombie.
alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [ "${s%% *}" != Z ]
}

lockdir=${RATCHET_LOCK_DIR:-}
if [ -z "$lockdir" ]; then
  if [ -d /run/lock ]; then lockdir=/run/lock/ratchet; else lockdir=/tmp/ratchet-locks; fi
fi
if [ ! -d "$lockdir" ]; then mkdir -p "$lockdir"; chmod 1777 "$lockdir"; fi
lockfile=$lockdir/sut-core-$sut_core.lock
# Waits, at most until $2 (in $SECONDS), for no ratchet to hold core 1.
wait_core_free() {
  local left=$(($2 - SECONDS))
  ((left > 0)) || left=1
  if ! flock -n "$lockfile" true; then
    echo "realclient.sh: $1: waiting up to $left s for core $sut_core ($(cat "$lockfile" 2>/dev/null))" >&2
    flock -w "$left" "$lockfile" true || die "core $sut_core still in use after --lock-wait $lock_wait s ($(cat "$lockfile" 2>/dev/null))"
  fi
}
lock_deadline=$((SECONDS + lock_wait))
builds=$work/builds
mkdir "$builds"

# ---- ratchet's builds --------------------------------------------------
if [ "$from" = auto ]; then
  if "$R" build --help >/dev/null 2>&1; then from=build; else from=check; fi
fi
echo "realclient.sh: building ${#arms[@]} arms with ratchet ($from)" >&2
if [ "$from" = build ]; then
  "$R" build --json "${arms[@]}" > "$builds/build.json" 2> "$builds/build.err" ||
    die "ratchet build failed: $(tail -20 "$builds/build.err")"
  python3 benchmarks/realclient.py commands "$builds/build.json" "$work"
  for i in "${!arms[@]}"; do
    [ "$(cat "$work/arm$i/label")" = "${arms[$i]}" ] || die "ratchet build answered arm $i with $(cat "$work/arm$i/label"), not ${arms[$i]}"
  done
else
  # `ratchet check` builds an arm as compare would and runs its gate (every
  # byte of every response judged) for a moment under task-clock; its build
  # lands in a cache of its own, whose one entry is this arm's. A check
  # needs ratchet's lock of core 1: one held by another ratchet is waited for.
  for i in "${!arms[@]}"; do
    cache=$work/cache$i
    for ((try = 1; ; try++)); do
      wait_core_free "ratchet check ${arms[$i]}" "$lock_deadline"
      if RATCHET_BUILD_CACHE=$cache "$R" check --meter task-clock --samples 1 \
        --window-ms 300 --warmup-ms 200 "${arms[$i]}" > "$builds/check-$i.txt" 2>&1; then break; fi
      if ! grep -q 'is in use by another ratchet' "$builds/check-$i.txt" || ((SECONDS >= lock_deadline || try >= 100)); then
        die "ratchet check ${arms[$i]} failed: $(tail -20 "$builds/check-$i.txt")"
      fi
      sleep 2
    done
    manifests=("$cache"/*.manifest.json)
    if ((${#manifests[@]} != 1)) || [ ! -f "${manifests[0]}" ]; then
      die "${arms[$i]}: expected one build in $cache, found ${#manifests[@]}"
    fi
    entry=${manifests[0]%.manifest.json}
    read -r src_sha bin_sha < <(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["source_sha256"], m["binary_sha256"])' "${manifests[0]}")
    bin=""
    for f in "$entry"/*; do
      if [ -f "$f" ] && [ -x "$f" ] && [ "$(sha256sum < "$f" | cut -d' ' -f1)" = "$bin_sha" ]; then bin=$f; fi
    done
    [ -n "$bin" ] || die "${arms[$i]}: no binary in $entry matches its manifest"
    mkdir -p "$work/arm$i"
    echo "${arms[$i]}" > "$work/arm$i/label"
    printf '%s\t%s\t%s\n' "$bin" "$src_sha" "$bin_sha" > "$work/arm$i/source"
    # As ratchet starts them: the control with GOMAXPROCS=1, every server
    # told its port by the default target.port_args.
    if [ "${arms[$i]}" = control ]; then echo GOMAXPROCS=1; else :; fi > "$work/arm$i/env"
    printf '%s\n' --port '{port}' > "$work/arm$i/args"
  done
fi
printf 'arm\tname\tbinary_sha256\tsource_sha256\tbuilt_as\n' > "$work/arms.tsv"
for i in "${!arms[@]}"; do
  IFS=$'\t' read -r bin src_sha bin_sha < "$work/arm$i/source"
  install -m 0755 "$bin" "$work/arm$i/server"
  got=$(sha256sum < "$work/arm$i/server" | cut -d' ' -f1)
  [ "$bin_sha" = - ] || [ "$got" = "$bin_sha" ] || die "${arms[$i]}: $bin is not the binary ratchet recorded"
  printf '%s\t%s\t%s\t%s\t%s\n' "${arms[$i]}" "$(name_of "${arms[$i]}")" "$got" "$src_sha" "$bin" >> "$work/arms.tsv"
done

# ---- locks and cgroups -------------------------------------------------
exec {lockfd}<>"$lockfile"
if ! flock -n "$lockfd"; then
  left=$((lock_deadline - SECONDS)); ((left > 0)) || left=1
  echo "realclient.sh: waiting up to $left s for core $sut_core ($(cat "$lockfile"))" >&2
  flock -w "$left" "$lockfd" || die "core $sut_core still in use after --lock-wait $lock_wait s ($(cat "$lockfile")); lock file $lockfile"
fi
echo "pid $$ benchmarks/realclient.sh" > "$lockfile"
if [ -n "${HOST_LOCK:-}" ]; then
  exec {hostfd}>>"$HOST_LOCK"
  flock -w 3600 "$hostfd" || die "HOST_LOCK $HOST_LOCK still held after an hour"
fi

cg2=""
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then cg2=/sys/fs/cgroup
elif [ -d /sys/fs/cgroup/unified ] && [ "$(stat -fc %T /sys/fs/cgroup/unified)" = cgroup2fs ]; then cg2=/sys/fs/cgroup/unified
fi
mode=uncapped cap="" cap_note="" acct=""
if ((capped)); then
  period_us=100000 quota_us=$((quota_pct * 1000))
  if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    cap=/sys/fs/cgroup/cpu/realclient-$$
    mkdir "$cap"; cgroups+=("$cap")
    echo "$period_us" > "$cap/cpu.cfs_period_us"
    echo "$quota_us" > "$cap/cpu.cfs_quota_us"
    cap_note="cgroup v1 cpu.cfs_quota_us $quota_us per cpu.cfs_period_us $period_us"
  elif [ -n "$cg2" ] && grep -qw cpu "$cg2/cgroup.controllers"; then
    if ! grep -qw cpu "$cg2/cgroup.subtree_control"; then
      echo +cpu > "$cg2/cgroup.subtree_control"
      echo "realclient.sh: enabled the cpu controller in $cg2/cgroup.subtree_control" >&2
    fi
    cap=$cg2/realclient-$$
    mkdir "$cap"; cgroups+=("$cap")
    echo "$quota_us $period_us" > "$cap/cpu.max"
    acct=$cap
    cap_note="cgroup2 cpu.max \"$quota_us $period_us\""
  else
    die "--capped: no CPU bandwidth controller (neither /sys/fs/cgroup/cpu/cpu.cfs_quota_us nor cgroup2 cpu)"
  fi
  mode="capped at ${quota_pct}% of a core ($cap_note)"
fi
if [ -z "$acct" ] && [ -n "$cg2" ]; then
  acct=$cg2/realclient-$$
  mkdir "$acct"; cgroups+=("$acct")
fi
procs=""
for g in "${cgroups[@]}"; do procs+=${procs:+:}$g/cgroup.procs; done

# ---- the record -----------------------------------------------------------
mkdir -p "$out/ab"
record_made=1
cp -r "$builds" "$out/builds"
cp "$work/arms.tsv" "$out/arms.tsv"
{
  printf '%q ' "$0" "${orig_args[@]}"; echo
  dirty=$(git status --porcelain -- harness.toml treatment control knowledge-base benchmarks/realclient.sh benchmarks/realclient.py benchmarks/lib.sh | tr '\n' ' ')
  echo "main at $(git rev-parse HEAD)${dirty:+; changed in the working tree: $dirty}"
  echo "ratchet: $R ($("$R" --version 2>/dev/null || echo unknown version))"
  for v in RATCHET RATCHET_LOCK_DIR RATCHET_BUILD_CACHE HOST_LOCK; do
    if [ -n "${!v:-}" ]; then echo "environment: $v=${!v}"; fi
  done
} > "$out/command.txt"

cpu_accounting=unknown config_hz=unknown
if [ -r /proc/config.gz ]; then
  config_hz=$(zcat /proc/config.gz | sed -n 's/^CONFIG_HZ=//p')
  cpu_accounting=$(zcat /proc/config.gz | grep -E '^CONFIG_(TICK_CPU_ACCOUNTING|VIRT_CPU_ACCOUNTING_GEN|IRQ_TIME_ACCOUNTING)=y' | sed 's/^CONFIG_//; s/=y$//' | paste -sd, -)
fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "kernel: $(uname -srvm)"
  echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "nproc: $(nproc)"
  echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sort | uniq -c | sed 's/^ *//' | paste -sd';' -)"
  echo "ab: $(ab -V | head -1); $(dpkg-query -W -f='${Package} ${Version}' apache2-utils 2>/dev/null || echo 'apache2-utils version unknown')"
  echo "CLK_TCK (USER_HZ): $clk_tck; CONFIG_HZ: $config_hz; cpu time accounting: $cpu_accounting"
  echo "server core: $sut_core, as $sut_user; ab core: $load_core"
  echo "mode: $mode"
  echo "accounting cgroup: ${acct:-none (no cgroup2 mounted)}"
  echo "net.ipv4.ip_local_port_range: $(tr '\t' ' ' < /proc/sys/net/ipv4/ip_local_port_range)"
  echo "net.ipv4.tcp_tw_reuse: $(cat /proc/sys/net/ipv4/tcp_tw_reuse); tcp_timestamps: $(cat /proc/sys/net/ipv4/tcp_timestamps); tcp_max_tw_buckets: $(cat /proc/sys/net/ipv4/tcp_max_tw_buckets); somaxconn: $(cat /proc/sys/net/core/somaxconn)"
  echo "cpufreq governor of core $sut_core: $(cat /sys/devices/system/cpu/cpu$sut_core/cpufreq/scaling_governor 2>/dev/null || echo none)"
  echo "load average at start: $(cut -d' ' -f1-3 < /proc/loadavg)"
} > "$out/environment.txt"

# ---- one run -------------------------------------------------------------
start_server() { # index port
  local d=$work/arm$1 pat='{port}' a envs=() args=()
  mapfile -t envs < "$d/env"
  while IFS= read -r a; do args+=("${a//"$pat"/$2}"); done < "$d/args"
  (
    cd /
    if [ -n "$lockfd" ]; then exec {lockfd}>&-; fi
    if [ -n "$hostfd" ]; then exec {hostfd}>&-; fi
    # sh joins the cgroups, then every exec keeps its pid: $! is the server.
    # shellcheck disable=SC2016 # $1 and $$ are sh's own
    exec taskset -c "$sut_core" sh -c 'IFS=:; for f in $1; do echo $$ > "$f" || exit 97; done; shift; exec "$@"' \
      sh "$procs" setpriv --reuid="$sut_user" --regid="$sut_user" --clear-groups --inh-caps=-all --no-new-privs -- \
      env -i PATH=/usr/bin:/bin "${envs[@]}" "$d/server" "${args[@]}"
  ) > "$work/server.log" 2>&1 < /dev/null &
  server_pid=$!
}
listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }
wait_listening() { # port; at most 5 s
  local i
  for ((i = 0; i < 100; i++)); do
    alive "$server_pid" || return 1
    listening "$1" && return 0
    sleep 0.05
  done
  return 1
}
port_no=0 port=""
next_port() { # sets port: one with no socket at all (not even TIME_WAIT) on it
  local i
  for ((i = 0; i < 50; i++)); do
    port=$((port_base + port_no % 1000)); port_no=$((port_no + 1))
    if [ -z "$(ss -Htan "sport = :$port" 2>/dev/null)" ]; then return 0; fi
  done
  die "no free port in $port_base-$((port_base + 999)) after 50 tries"
}
run_ab() { # port requests outfile; waited for with `wait`, which a signal interrupts
  local rc=0
  timeout --kill-after=5 "$ab_timeout" taskset -c "$load_core" \
    ab -q -r -s 30 -n "$2" -c "$concurrency" "http://127.0.0.1:$1/" > "$3" 2>&1 < /dev/null &
  ab_pid=$!
  wait "$ab_pid" || rc=$?
  ab_pid=""
  return "$rc"
}
ab_field() { # key file; ab prints "Key:   value unit"
  awk -F': *' -v k="$1" '$1 == k { split($2, v, " "); print v[1]; exit }' "$2"
}
ab_verdict() { # file requests rc -> "complete failed non2xx write_errors doclen rps seconds status"
  local f=$1 n=$2 rc=$3 complete failed non2xx werr doclen rps secs status=ok
  complete=$(ab_field "Complete requests" "$f"); failed=$(ab_field "Failed requests" "$f")
  non2xx=$(ab_field "Non-2xx responses" "$f"); werr=$(ab_field "Write errors" "$f")
  doclen=$(ab_field "Document Length" "$f"); rps=$(ab_field "Requests per second" "$f")
  secs=$(ab_field "Time taken for tests" "$f")
  : "${complete:=-}" "${failed:=-}" "${non2xx:=0}" "${werr:=0}" "${doclen:=-}" "${rps:=-}" "${secs:=-}"
  if ((rc == 124 || rc == 137)); then status="failed: ab ran past ${ab_timeout} s"
  elif ((rc != 0)); then status="failed: ab exit $rc: $(grep -v '^ *$' "$f" | tail -1 | tr '\t' ' ')"
  elif [ "$complete" != "$n" ]; then status="failed: $complete of $n requests complete"
  elif [ "$failed" != 0 ]; then status="failed: $failed failed requests"
  elif [ "$non2xx" != 0 ]; then status="failed: $non2xx non-2xx responses"
  elif [ "$werr" != 0 ]; then status="failed: $werr write errors"
  elif [ "$doclen" != 2 ]; then status="failed: document length $doclen, not the contract's 2 bytes"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$complete" "$failed" "$non2xx" "$werr" "$doclen" "$rps" "$secs" "$status"
}
cpu_lines() { grep -E "^cpu($load_core|$sut_core) " /proc/stat; }
stat_of() { # cgroup-dir key
  if [ -n "$1" ]; then awk -v k="$2" '$1 == k { print $2 }' "$1/cpu.stat"; else echo -; fi
}

header=(round position arm port requests complete failed non2xx write_errors doc_length
  status cpu1_busy_ticks cpu1_steal_ticks cpu1_total_ticks cpu1_busy_us cpu1_busy_us_per_conn
  server_task_us server_task_us_per_conn rps ab_seconds core0_busy_share cpu1_busy_share
  throttled_periods periods loadavg1)
(IFS=$'\t'; echo "${header[*]}") > "$out/runs.tsv"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
nfailed=0

measure() { # round position index
  local r=$1 pos=$2 i=$3 arm=${arms[$3]} tag rc verdict status before="" after
  local u0 u1 t0 t1 p0 p1 load busy complete failed non2xx werr doclen rps secs
  local b_t s_t t_t b_us b_pc task task_pc c0 c1 thr per k
  next_port
  tag=r$r-$(printf '%02d' "$i")
  load=$(cut -d' ' -f1 < /proc/loadavg)
  start_server "$i" "$port"
  if ! wait_listening "$port"; then
    status="failed: not listening on $port within 5 s: $(tail -3 "$work/server.log" | tr '\n\t' '  ')"
    verdict=$(printf -- '-\t-\t-\t-\t-\t-\t-\t%s' "$status")
  elif [ "$(readlink "/proc/$server_pid/exe")" != "$work/arm$i/server" ]; then
    verdict=$(printf -- '-\t-\t-\t-\t-\t-\t-\t%s' "failed: pid $server_pid is not the server")
  else
    rc=0
    if ((warmup > 0)); then
      run_ab "$port" "$warmup" "$out/ab/$tag-warmup.txt" || rc=$?
      verdict=$(ab_verdict "$out/ab/$tag-warmup.txt" "$warmup" "$rc")
    else
      verdict=$(printf -- '-\t-\t-\t-\t-\t-\t-\tok')
    fi
    if [ "${verdict##*$'\t'}" != ok ]; then
      status=${verdict##*$'\t'}
      status="failed: warm-up: ${status#failed: }"
      verdict=$(printf -- '-\t-\t-\t-\t-\t-\t-\t%s' "$status")
    else
      rc=0
      u0=$(stat_of "$acct" usage_usec); t0=$(stat_of "$cap" nr_throttled); p0=$(stat_of "$cap" nr_periods)
      before=$(cpu_lines)
      run_ab "$port" "$requests" "$out/ab/$tag.txt" || rc=$?
      after=$(cpu_lines)
      u1=$(stat_of "$acct" usage_usec); t1=$(stat_of "$cap" nr_throttled); p1=$(stat_of "$cap" nr_periods)
      verdict=$(ab_verdict "$out/ab/$tag.txt" "$requests" "$rc")
      if [ "${verdict##*$'\t'}" = ok ] && ! alive "$server_pid"; then
        verdict="${verdict%$'\t'*}"$'\t'"failed: the server exited during the run"
      fi
    fi
  fi
  stop_server
  if [ -n "$acct" ]; then
    for ((k = 0; k < 20; k++)); do [ -z "$(cat "$acct/cgroup.procs")" ] && break; sleep 0.05; done
    [ -z "$(cat "$acct/cgroup.procs")" ] || { kill_groups; die "processes left in $acct after stopping $arm"; }
  fi
  status=${verdict##*$'\t'}
  if [ -n "${before:-}" ]; then
    # cpuN: user nice system idle iowait irq softirq steal guest guest_nice;
    # busy = user+nice+system+irq+softirq (steal apart; guest is in user).
    busy=$(printf '%s\n%s\n' "$before" "$after" | awk -v s="cpu$sut_core" -v l="cpu$load_core" \
      -v clk="$clk_tck" -v n="$(cut -f1 <<< "$verdict")" -v u0="$u0" -v u1="$u1" \
      -v t0="$t0" -v t1="$t1" -v p0="$p0" -v p1="$p1" '
      { b = $2 + $3 + $4 + $7 + $8; t = $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9
        k = (NR <= 2) ? -1 : 1; B[$1] += k * b; T[$1] += k * t; S[$1] += k * $9 }
      END {
        us = B[s] * 1e6 / clk
        ok = (n ~ /^[0-9]+$/ && n > 0)
        task = (u0 ~ /^[0-9]+$/ && u1 ~ /^[0-9]+$/) ? u1 - u0 : "-"
        printf "%d\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s", B[s], S[s], T[s], us,
          ok ? sprintf("%.3f", us / n) : "-", task,
          (ok && task != "-") ? sprintf("%.3f", task / n) : "-",
          T[l] ? sprintf("%.4f", B[l] / T[l]) : "-", T[s] ? sprintf("%.4f", B[s] / T[s]) : "-",
          (t0 ~ /^[0-9]+$/) ? t1 - t0 : "-", (p0 ~ /^[0-9]+$/) ? p1 - p0 : "-" }')
  else
    busy=$(printf -- '-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-')
  fi
  # Columns in header order.
  IFS=$'\t' read -r complete failed non2xx werr doclen rps secs _ <<< "$verdict"
  IFS=$'\t' read -r b_t s_t t_t b_us b_pc task task_pc c0 c1 thr per <<< "$busy"
  local row=("$r" "$pos" "$arm" "$port" "$requests" "$complete" "$failed" "$non2xx" "$werr"
    "$doclen" "$status" "$b_t" "$s_t" "$t_t" "$b_us" "$b_pc" "$task" "$task_pc" "$rps" "$secs"
    "$c0" "$c1" "$thr" "$per" "$load")
  ((${#row[@]} == ${#header[@]})) || die "a runs.tsv row of ${#row[@]} columns"
  (IFS=$'\t'; echo "${row[*]}") >> "$out/runs.tsv"
  if [ "$status" != ok ]; then nfailed=$((nfailed + 1)); fi
  printf 'round %d/%d  %d/%d  %-70s %s\n' "$r" "$rounds" "$pos" "${#arms[@]}" "$arm" \
    "$([ "$status" = ok ] && echo "core 1 busy $b_pc us/conn, $rps req/s, core 0 busy $c0" || echo "$status")" >&2
}

for ((r = 1; r <= rounds; r++)); do
  mapfile -t order < <(python3 benchmarks/realclient.py order "$seed" "$r" "${#arms[@]}")
  ((${#order[@]} == ${#arms[@]})) || die "the shuffle gave ${#order[@]} arms, not ${#arms[@]}"
  for pos in "${!order[@]}"; do measure "$r" "$((pos + 1))" "${order[$pos]}"; done
done
finished=$(date -u +%Y-%m-%dT%H:%M:%SZ)
echo "load average at end: $(cut -d' ' -f1-3 < /proc/loadavg)" >> "$out/environment.txt"

{
  printf 'fact\tvalue\n'
  printf 'started\t%s\nfinished\t%s\nrounds\t%s\nrequests\t%s\nwarmup\t%s\nconcurrency\t%s\n' \
    "$started" "$finished" "$rounds" "$requests" "$warmup" "$concurrency"
  printf 'seed\t%s\nmode\t%s\nsut_user\t%s\nbinaries_from\t%s\nclk_tck\t%s\n' \
    "$seed" "$mode" "$sut_user" "$([ "$from" = build ] && echo "ratchet build --json" || echo "ratchet check, one private build cache per arm")" "$clk_tck"
  printf 'config_hz\t%s\ncpu_accounting\t%s\nsut_core\t%s\nload_core\t%s\n' \
    "$config_hz" "$cpu_accounting" "$sut_core" "$load_core"
} > "$out/facts.tsv"
python3 benchmarks/realclient.py summarize "$out"

cmdline=$(head -1 "$out/command.txt")
cmdline=${cmdline% }
cat > "$out/README.md" <<EOF
# ab against ratchet's builds of the treatment: core 1 busy time per connection

- What: each server (arms.tsv: ratchet arm specs, built by ratchet, their
  binaries' sha256) measured with ApacheBench, a client this project did not
  write: \`ab -q -r -s 30 -n $requests -c $concurrency http://127.0.0.1:PORT/\`,
  one request per connection (HTTP/1.0, no keep-alive), pinned to core $load_core; the
  server alone on core $sut_core (taskset) as the unprivileged user $sut_user, a fresh one
  per run on a new port, warmed with $warmup requests first. Mode: $mode.
- Rounds: $rounds, each running every server once in a fresh order shuffled from seed
  $seed and the round (runs.tsv's \`position\`), so the machine's drift lands on
  every server alike; ratios are taken within a round.
- Core 1 busy: \`/proc/stat\`'s \`cpu$sut_core\` read just before ab started and just after
  it exited; busy = user + nice + system + irq + softirq. **Steal is not busy**
  (the hypervisor ran something else; it is in \`cpu1_steal_ticks\`); iowait is
  idle. USER_HZ ticks ($clk_tck/s) are converted to µs and divided by completed
  requests. It counts everything core $sut_core did: the server, its kernel and softirq
  work, the part of ab's network receive work that ran there, and anything else
  that was scheduled there.
- The server's own CPU time (cross-check): its cgroup's \`cpu.stat\` \`usage_usec\`
  (cgroup2), the scheduler's runtime of its tasks over the same run.
- A run counts only if ab completed all $requests requests with 0 failed, 0
  non-2xx, 0 write errors and the contract's 2-byte body, after a warm-up that
  passed the same checks; \`-r\` makes ab count a receive error as a failure
  rather than stop. A failed run is listed in summary.md and left out of the
  medians, never dropped silently.
- --capped: the quota is what the scheduler charges to the server's tasks; the
  softirq and interrupt work done on its core for its connections is charged to
  it only when it ran in the server's own context (and then, this kernel having
  no IRQ time accounting, as the server's time), never when it ran in
  ksoftirqd or in ab's context: core 1's busy time can exceed the quota.
- Files: command.txt (the command and revision), environment.txt, facts.tsv,
  arms.tsv, builds/ (how ratchet built each arm), runs.tsv (one line per run),
  ab/ (ab's own output of every run, warm-ups as *-warmup.txt), summary.md
  (\`python3 benchmarks/realclient.py summarize $out\`).

Reproduce (as root, on a quiet machine): \`$cmdline\`
EOF
echo "records in $out" >&2
if ((nfailed > 0)); then echo "realclient.sh: $nfailed runs failed; see $out/summary.md" >&2; exit 1; fi
