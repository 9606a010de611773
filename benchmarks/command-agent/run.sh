#!/usr/bin/env bash
# One ratchet attempt proposed by a real coding-agent CLI: OpenAI Codex
# (`codex exec`, through codex-agent.sh) as the `command` agent, against a
# local model server. See README.md beside this file.
#
#   benchmarks/command-agent/run.sh            ratchet run --agent command --max-iterations 1
#                                              in a scratch clone: it MEASURES ON THIS HOST (the
#                                              A/A check, then the attempt). Records go to
#                                              benchmarks/runs/command-agent-<UTC time>/
#   benchmarks/command-agent/run.sh --propose  ratchet propose --agent command instead: the same
#                                              agent, prompt and build, nothing measured; records
#                                              go to ${TMPDIR:-/tmp}/command-agent-propose-<UTC time>/
#
# Environment:
#   RATCHET                 the ratchet binary (default: target/release/ratchet here)
#   RATCHET_CODEX_BASE_URL  a server with /v1/responses to use instead of starting
#                           scripts/local-model.sh (then PORT and CTX are unused)
#   RATCHET_CODEX_MODEL     the model name codex sends (default smollm2)
#   RATCHET_CODEX_API_KEY   that server's key, if it checks one (reaches codex via pass_env)
#   PORT=8091 CTX=8192      the local server's port and context (llama.cpp caps the context
#                           at the model's training context: 8192 for SmolLM2-135M)
#   LOCAL_MODEL_GGUF        a GGUF for scripts/local-model.sh to serve instead of SmolLM2-135M
#   AGENT_TIMEOUT_S=900     codex's time limit per attempt; ratchet's is 60 s more
#   CONTEXT_TOKENS          if set, agents.command.context_tokens (a ratchet that knows it)
#   KEEP=1                  keep the scratch clone
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mode=run
case ${1:-} in
  "") ;;
  --propose) mode=propose ;;
  *) sed -n '2,/^set -e/{/^set -e/!p}' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
R=$(realpath "${RATCHET:-$repo/target/release/ratchet}")
[ -x "$R" ] || { echo "no ratchet binary at $R (cargo build --release, or set RATCHET)" >&2; exit 1; }
PORT=${PORT:-8091}
CTX=${CTX:-8192}
AGENT_TIMEOUT_S=${AGENT_TIMEOUT_S:-900}
MODEL=${RATCHET_CODEX_MODEL:-smollm2}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
if [ $mode = run ]; then
  out=$repo/benchmarks/runs/command-agent-$stamp
else
  out=${TMPDIR:-/tmp}/command-agent-propose-$stamp
fi
mkdir -p "$out"
work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  if [ "${KEEP:-}" = 1 ]; then echo "scratch clone kept: $work/repo"; else rm -rf "$work"; fi
}
trap cleanup EXIT
log() { echo "run.sh: $*" | tee -a "$out/steps.txt"; }

# The agent: codex, installed once (npm needs this shell's environment;
# under ratchet the agent gets almost none).
t0=$(date +%s)
codex=$("$here/codex-agent.sh" --install 2>>"$out/steps.txt")
codex_version=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "${codex%/.bin/codex}/@openai/codex/package.json" | head -1)
log "codex $codex_version at $codex (ready in $(( $(date +%s) - t0 )) s)"
sha256sum "$here/codex-agent.sh" >"$out/codex-agent.sha256"   # which wrapper ran; the script lives in the repository

# The model server.
if [ -n "${RATCHET_CODEX_BASE_URL:-}" ]; then
  base_url=$RATCHET_CODEX_BASE_URL
  server_cmd="(external: $base_url)"
  log "using the model server at $base_url"
else
  base_url=http://127.0.0.1:$PORT/v1
  if curl -sf -m 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
    echo "something already answers on port $PORT: stop it, or set PORT or RATCHET_CODEX_BASE_URL" >&2
    exit 1
  fi
  [ -x "$repo/scripts/local-model.sh" ] || { echo "$repo/scripts/local-model.sh is missing" >&2; exit 1; }
  serve=(serve --port "$PORT" --ctx "$CTX" --threads 1)
  [ -z "${LOCAL_MODEL_GGUF:-}" ] || serve+=(--model "$(realpath "$LOCAL_MODEL_GGUF")")
  server_cmd="scripts/local-model.sh ${serve[*]}"
  "$repo/scripts/local-model.sh" "${serve[@]}" > "$out/model-server.log" 2>&1 < /dev/null &
  server_pid=$!
  t0=$(date +%s)
  until grep -q '^READY' "$out/model-server.log" 2>/dev/null; do
    kill -0 "$server_pid" 2>/dev/null || { tail -20 "$out/model-server.log" >&2; echo "the model server exited" >&2; exit 1; }
    [ $(( $(date +%s) - t0 )) -lt 600 ] || { echo "the model server did not print READY in 600 s" >&2; exit 1; }
    sleep 0.5
  done
  log "$(grep -m1 '^READY' "$out/model-server.log") (pid $server_pid, up in $(( $(date +%s) - t0 )) s)"
fi
ctx_served=$(curl -sf -m 3 "${base_url%/v1}/props" 2>/dev/null | grep -o '"n_ctx": *[0-9]*' | head -1 | grep -o '[0-9]*$' || true)
[ -n "$ctx_served" ] && log "the server holds a context of $ctx_served tokens"

# A scratch clone (the committed HEAD of this repository) with a harness.toml
# that makes codex the command agent.
git clone -q "$repo" "$work/repo"
head=$(git -C "$work/repo" rev-parse HEAD)
log "scratch clone of $repo at $head in $work/repo"
python3 - "$work/repo/harness.toml" "$here/codex-agent.sh" "$base_url" "$MODEL" \
  "$AGENT_TIMEOUT_S" "$out/codex-transcripts" "${RATCHET_CODEX_API_KEY:+RATCHET_CODEX_API_KEY}" \
  "${CONTEXT_TOKENS:-}" <<'PY'
import json, re, sys, tomllib
path, wrapper, url, model, limit, logs, key_env, context = sys.argv[1:9]
lines = open(path).read().splitlines()
out, table = [], None
for line in lines:
    m = re.match(r"\s*\[([^\]]+)\]", line)
    if m:
        table = m.group(1).strip()
    if table == "agents.command":
        continue  # replaced below
    if table == "run" and re.match(r"\s*agent\s*=", line):
        line = 'agent = "command"   # benchmarks/command-agent/run.sh'
    out.append(line)
argv = [wrapper, "--base-url", url, "--model", model, "--timeout", limit,
        "--log-dir", logs, "{prompt_file}"]
out += ["", "# benchmarks/command-agent/run.sh: OpenAI Codex against a model server",
        "[agents.command]",
        "argv = " + json.dumps(argv),
        f"timeout_s = {int(limit) + 60}",
        "pass_env = " + json.dumps([key_env] if key_env else [])]
if context:
    out.append(f"context_tokens = {int(context)}")
text = "\n".join(out) + "\n"
cfg = tomllib.loads(text)
assert cfg["run"]["agent"] == "command" and cfg["agents"]["command"]["argv"] == argv
open(path, "w").write(text)
PY
cp "$work/repo/harness.toml" "$out/harness.toml"

if [ $mode = run ]; then
  cmd=("$R" run --agent command --max-iterations 1)
else
  cmd=("$R" propose --agent command --count 1 --out "$out/propose.json")
fi
{
  echo "$0 $*"
  echo "  at $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), main at $(git -C "$repo" rev-parse --short HEAD), scratch clone at ${head:0:12}"
  echo "  ratchet: $R ($("$R" --version), sha256 $(sha256sum "$R" | cut -c1-16))"
  echo "  model server: $server_cmd; model $MODEL at $base_url${ctx_served:+, context $ctx_served}"
  echo "  agent: codex-agent.sh (sha256 in codex-agent.sha256) running codex $codex_version ($codex); harness.toml here"
  echo "  in the scratch clone: ${cmd[*]}"
} > "$out/command.txt"
ls "$work/repo/results" > "$work/results-before" 2>/dev/null || true

log "running: ${cmd[*]}"
t0=$(date +%s)
set +e
(cd "$work/repo" && "${cmd[@]}") 2>&1 | tee "$out/output.txt"
status=${PIPESTATUS[0]}
set -e
log "ratchet exited $status after $(( $(date +%s) - t0 )) s"

# What the run left: its results directory (its lessons and profiles among
# them), the clone's status, and its git refs.
mkdir -p "$out/results"
for d in $(ls "$work/repo/results" 2>/dev/null); do
  grep -qxF "$d" "$work/results-before" || cp -a "$work/repo/results/$d" "$out/results/"
done
git -C "$work/repo" status --short > "$out/clone-status.txt"
git -C "$work/repo" for-each-ref refs/ratchet > "$out/clone-refs.txt"
for ref in $(git -C "$work/repo" for-each-ref --format='%(refname)' 'refs/ratchet/*/attempts/*'); do
  git -C "$work/repo" show --stat --patch "$ref" > "$out/$(echo "${ref#refs/ratchet/}" | tr / -).patch"
done
log "records in $out"
exit "$status"
