#!/usr/bin/env bash
# ratchet's `command` agent as OpenAI Codex (`codex exec`, npm @openai/codex,
# pinned) against an OpenAI-compatible model server (a local llama.cpp by
# default). See README.md beside this file.
#
#   [agents.command]
#   argv = ["/abs/path/benchmarks/command-agent/codex-agent.sh",
#           "--base-url", "http://127.0.0.1:8091/v1", "--model", "smollm2",
#           "{prompt_file}"]
#   timeout_s = 960
#
#   codex-agent.sh [OPTIONS] [PROMPT_FILE]   in the candidate worktree (the cwd);
#                          PROMPT_FILE defaults to $RATCHET_PROMPT_FILE
#   codex-agent.sh [--codex-dir D] --install  install codex if missing, print its path
#
# Codex edits the cwd; everything it leaves outside the allowed paths
# (new files, build outputs, edits elsewhere) is put back before the wrapper
# reports. The wrapper never runs git. Its stdout ends with one
# `HYPOTHESIS: ...` line: the model's own, if its final message has one,
# else a sentence saying what codex changed. Codex's transcript goes to a
# log (kept in the log directory if one is given), and only a summary, every
# line indented, reaches ratchet, so nothing codex echoes can be read as a
# HYPOTHESIS/STACK/RETRY line.
#
# Options, each defaulting to an environment variable, then a value. Prefer
# options in argv: ratchet redacts the value of every variable named in
# agents.command.pass_env from the agent's output (the model's name too).
#   --base-url URL     RATCHET_CODEX_BASE_URL   http://127.0.0.1:8091/v1 (serving /v1/responses)
#   --model NAME       RATCHET_CODEX_MODEL      smollm2
#   --context TOKENS   RATCHET_CODEX_CONTEXT    the model's window, told to codex: what a
#                                               llama.cpp server's /props says, else 16384
#   --timeout S        RATCHET_CODEX_TIMEOUT_S  600: codex is stopped then (keep it below
#                                               agents.command.timeout_s so the wrapper reports)
#   --prompt MODE      RATCHET_CODEX_PROMPT     compact: the prompt's "# Lessons" and profile
#                                               sections go to files codex may read, not inline;
#                                               full: the prompt as ratchet wrote it
#   --allowed "GLOBS"  RATCHET_CODEX_ALLOWED    "treatment/*.c treatment/*.h" (run.allowed_paths)
#   --log-dir DIR      RATCHET_CODEX_LOG_DIR    keep each transcript there (default: none)
#   --codex-dir DIR    RATCHET_CODEX_DIR        the install, default ~/.cache/ratchet/codex of the
#                                               real user (ratchet gives agents a throwaway HOME)
#   --codex-bin PATH   RATCHET_CODEX_BIN        use this codex instead (no version pin)
# The key: RATCHET_CODEX_API_KEY (a local server takes any; default sk-local);
# name it in pass_env for a server that checks it.
set -uo pipefail

VERSION=0.171.0
BASE_URL=${RATCHET_CODEX_BASE_URL:-http://127.0.0.1:8091/v1}
MODEL=${RATCHET_CODEX_MODEL:-smollm2}
export RATCHET_CODEX_API_KEY=${RATCHET_CODEX_API_KEY:-sk-local}
CONTEXT=${RATCHET_CODEX_CONTEXT:-}
LIMIT=${RATCHET_CODEX_TIMEOUT_S:-600}
PROMPT_MODE=${RATCHET_CODEX_PROMPT:-compact}
ALLOWED_GLOBS=${RATCHET_CODEX_ALLOWED:-treatment/*.c treatment/*.h}
LOG_DIR=${RATCHET_CODEX_LOG_DIR:-}
CODEX_BIN=${RATCHET_CODEX_BIN:-}
real_home=$(getent passwd "$(id -u)" | cut -d: -f6)
DIR=${RATCHET_CODEX_DIR:-${real_home:-$HOME}/.cache/ratchet/codex}
INSTALL=
while [ $# -gt 0 ]; do
  case $1 in
    --install) INSTALL=1; shift; continue ;;
    -h|--help) sed -n '2,/^set -u/{/^set -u/!p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    --base-url|--model|--context|--timeout|--prompt|--allowed|--log-dir|--codex-dir|--codex-bin)
      [ $# -ge 2 ] || { echo "codex-agent: error: $1 needs a value" >&2; exit 2; } ;;
    -*) echo "codex-agent: error: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
  case $1 in
    --base-url) BASE_URL=$2 ;;
    --model) MODEL=$2 ;;
    --context) CONTEXT=$2 ;;
    --timeout) LIMIT=$2 ;;
    --prompt) PROMPT_MODE=$2 ;;
    --allowed) ALLOWED_GLOBS=$2 ;;
    --log-dir) LOG_DIR=$2 ;;
    --codex-dir) DIR=$2 ;;
    --codex-bin) CODEX_BIN=$2 ;;
  esac
  shift 2
done
case $PROMPT_MODE in compact|full) ;; *) echo "codex-agent: error: --prompt compact|full" >&2; exit 2 ;; esac
set -f; read -r -a ALLOWED <<<"$ALLOWED_GLOBS"; set +f

say() { printf 'codex-agent: %s\n' "$*"; }
die() { printf 'codex-agent: error: %s\n' "$*" >&2; exit 1; }

install_codex() {
  local bin=$DIR/node_modules/.bin/codex
  [ -x "$bin" ] && { echo "$bin"; return 0; }
  command -v npm >/dev/null || die "npm not found (apt-get install npm)"
  mkdir -p "$(dirname "$DIR")"
  (
    flock 9
    [ -x "$bin" ] && exit 0
    [ -e "$DIR" ] && die "$DIR exists without a codex in it: remove it"
    stage=$(mktemp -d "$DIR.stage.XXXXXX")
    t0=$(date +%s)
    (cd "$stage" && npm install --no-audit --no-fund --update-notifier=false --loglevel=error "@openai/codex@$VERSION" >&2) \
      || { rm -rf "$stage"; die "npm install @openai/codex@$VERSION failed"; }
    mv "$stage" "$DIR"
    say "installed @openai/codex@$VERSION in $DIR in $(( $(date +%s) - t0 )) s ($(du -sh "$DIR" | cut -f1))" >&2
  ) 9>"$DIR.lock" || exit 1
  echo "$bin"
}

if [ -n "$INSTALL" ]; then
  install_codex
  exit
fi

PROMPT_FILE=${1:-${RATCHET_PROMPT_FILE:-}}
[ -n "$PROMPT_FILE" ] && [ -r "$PROMPT_FILE" ] || die "no readable prompt file (argument or RATCHET_PROMPT_FILE)"
PROMPT_FILE=$(realpath "$PROMPT_FILE")
WT=$(pwd -P)

if [ -n "$CODEX_BIN" ]; then
  CODEX=$CODEX_BIN
else
  CODEX=$(install_codex) || exit 1
  # Read, not run: run without CODEX_HOME, codex writes under ~/.codex.
  have=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$DIR/node_modules/@openai/codex/package.json" | head -1)
  [ "$have" = "$VERSION" ] || die "$DIR holds @openai/codex ${have:-?}, not $VERSION: remove it"
fi

# Everything of the wrapper's and codex's lives here, outside the worktree.
work=$(mktemp -d "${TMPDIR:-/tmp}/codex-agent.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/home" "$work/codex-home" "$work/tmp" "$work/before"

# The worktree before codex, minus the git link, to put back what it may not
# change. A worktree is a checkout of the repository: tens of MB at most.
tar -C "$WT" --exclude=./.git -cf - . | tar -C "$work/before" -xf - \
  || die "could not snapshot the worktree"
git_link_before=$(cd "$WT" && { [ -f .git ] && sha256sum .git || find .git -maxdepth 0 -printf '%T@ %s\n' 2>/dev/null; })

# The prompt codex gets.
prompt=$work/prompt.md
if [ "$PROMPT_MODE" = compact ]; then
  awk -v dir="$work" '
    /^```/ { fence = !fence }
    fence { if (sec != "") print > file; else print; next }
    /^# Lessons$/ { sec = "lessons"; file = dir "/lessons.md" }
    /^# Champion profile/ { sec = "profile"; file = dir "/profile.md" }
    /^# / && !/^# Lessons$/ && !/^# Champion profile/ { sec = "" }
    sec != "" { print > file; next }
    { print }
  ' "$PROMPT_FILE" > "$prompt"
  for part in lessons profile; do
    if [ -s "$work/$part.md" ]; then
      printf '\n# %s\n\nNot inline, to save context: read %s (%s lines) if you need it.\n' \
        "${part^}" "$work/$part.md" "$(wc -l < "$work/$part.md")" >> "$prompt"
    fi
  done
else
  cp "$PROMPT_FILE" "$prompt"
fi
cat >> "$prompt" <<'EOF'

# How to finish

Make the one change by editing the file(s) in the current directory, then end
your final message with the line `HYPOTHESIS: <one sentence>` saying what you
changed and why it should lower the cost per connection. Do not run git.
EOF

# The context codex is told: a llama.cpp server says what it really holds
# (it caps --ctx at the model's training context: 8192 for SmolLM2).
if [ -z "$CONTEXT" ]; then
  CONTEXT=$(curl -sf -m 3 "${BASE_URL%/v1}/props" 2>/dev/null | grep -o '"n_ctx": *[0-9]*' | head -1 | grep -o '[0-9]*$')
  CONTEXT=${CONTEXT:-16384}
fi
# Nothing but the model server: no web search, analytics or plugin sync (with
# these off, strace shows no DNS lookup and no connection elsewhere); fewer
# tools, so a smaller prompt.
provider="{name=\"local\",base_url=\"$BASE_URL\",wire_api=\"responses\",env_key=\"RATCHET_CODEX_API_KEY\",request_max_retries=1,stream_max_retries=0,stream_idle_timeout_ms=900000}"
log=$work/codex.log
t0=$(date +%s)
HOME=$work/home CODEX_HOME=$work/codex-home TMPDIR=$work/tmp \
timeout -k 10 "$LIMIT" "$CODEX" exec \
  --skip-git-repo-check --ephemeral --color never \
  --sandbox workspace-write \
  -m "$MODEL" \
  -c model_provider=local \
  -c "model_providers.local=$provider" \
  -c "model_context_window=$CONTEXT" \
  -c approval_policy=never \
  -c web_search=disabled -c analytics.enabled=false \
  --disable multi_agent --disable goals --disable plugins \
  -c check_for_update_on_startup=false \
  -c sandbox_workspace_write.exclude_slash_tmp=true \
  -c sandbox_workspace_write.network_access=false \
  -o "$work/last-message.txt" \
  - < "$prompt" > "$log" 2>&1
rc=$?
wall=$(( $(date +%s) - t0 ))

if [ -n "$LOG_DIR" ]; then
  mkdir -p "$LOG_DIR" \
    && keep=$(mktemp -d "$LOG_DIR/$(date -u +%Y%m%dT%H%M%SZ).XXXX") \
    && cp "$log" "$prompt" "$keep/" \
    && { [ ! -e "$work/last-message.txt" ] || cp "$work/last-message.txt" "$keep/"; }
fi

# What codex changed: keep allowed files (regular files directly under the
# pattern's directory), put everything else back as it was.
allowed() {
  local p=$1 pat
  for pat in "${ALLOWED[@]}"; do
    # shellcheck disable=SC2053
    [[ $p == $pat ]] && [ "${p//[^\/]/}" = "${pat//[^\/]/}" ] && return 0
  done
  return 1
}
same() { # $1 now, $2 before: same type and content
  if [ -L "$1" ] || [ -L "$2" ]; then
    [ -L "$1" ] && [ -L "$2" ] && [ "$(readlink "$1")" = "$(readlink "$2")" ]
  else
    [ -f "$1" ] && [ -f "$2" ] && cmp -s "$1" "$2"
  fi
}
kept=() reverted=()
while IFS= read -r -d '' p; do
  p=${p#./}
  now=$WT/$p old=$work/before/$p
  { [ -e "$now" ] || [ -L "$now" ]; } && { [ -e "$old" ] || [ -L "$old" ]; } && same "$now" "$old" && continue
  if allowed "$p" && [ -f "$now" ] && [ ! -L "$now" ]; then
    kept+=("$p")
    continue
  fi
  reverted+=("$p")
  rm -rf "$now"
  if [ -e "$old" ] || [ -L "$old" ]; then
    mkdir -p "$(dirname "$now")" && cp -a "$old" "$now"
  fi
done < <({ (cd "$WT" && find . -path ./.git -prune -o \( -type f -o -type l \) -print0)
           (cd "$work/before" && find . \( -type f -o -type l \) -print0); } | sort -zu)
# Directories codex created and left empty.
(cd "$WT" && find . -mindepth 1 -path ./.git -prune -o -type d -empty -print0) |
  while IFS= read -r -d '' d; do
    [ -d "$work/before/$d" ] || { rmdir "$WT/$d" 2>/dev/null && echo "${d#./}/"; }
  done > "$work/rmdirs"
git_link_after=$(cd "$WT" && { [ -f .git ] && sha256sum .git || find .git -maxdepth 0 -printf '%T@ %s\n' 2>/dev/null; })

stat_of() { # +added -removed lines of one kept file
  diff -U0 "$work/before/$1" "$WT/$1" 2>/dev/null |
    awk 'NR > 2 && /^\+/ {a++} NR > 2 && /^-/ {d++} END {printf "+%d -%d", a, d}'
}
say "codex $VERSION ($CODEX), model $MODEL at $BASE_URL (context $CONTEXT), prompt $PROMPT_MODE ($(wc -c < "$prompt") bytes)"
say "codex exit $rc after $wall s$([ $rc = 124 ] && echo " (timed out at $LIMIT s)")"
changes=()
for p in "${kept[@]}"; do changes+=("$p ($(stat_of "$p"))"); done
say "changed: ${changes[*]:-nothing}"
[ ${#reverted[@]} -gt 0 ] && say "put back (outside ${ALLOWED[*]}): ${reverted[*]}"
[ -s "$work/rmdirs" ] && say "removed empty directories: $(tr '\n' ' ' < "$work/rmdirs")"
[ "$git_link_before" = "$git_link_after" ] || say "warning: the worktree's .git changed"
for p in "${kept[@]}"; do
  diff -U1 "$work/before/$p" "$WT/$p" | head -40 | sed 's/^/    /'
done

if [ $rc -ne 0 ]; then
  say "codex failed; the end of its transcript, then its errors:"
  grep -v '^\s*$' "$log" | tail -6 | cut -c1-300 | sed 's/^/  | /'
  grep -E '^(ERROR|Error|error)' "$log" | uniq | tail -4 | cut -c1-400 | sed 's/^/  | /'
  exit 1
fi

last=$work/last-message.txt
[ -s "$last" ] || last=/dev/null
say "codex's final message (first lines):"
grep -v '^\s*$' "$last" | head -8 | cut -c1-300 | sed 's/^/  | /'
field() { # the model's own `NAME: value` line, markdown emphasis around it stripped
  sed -n -E "s/^[[:space:]>#*_\`-]*$1[*_\`]*:[*_\`[:space:]]*//p" "$last" | head -1 |
    sed -E 's/[[:space:]]*[*_`]+[[:space:]]*$//' | cut -c1-400
}
hyp=$(field HYPOTHESIS)
cat=$(field CATEGORY | tr -cd '[:alnum:]_-' | cut -c1-40)
if [ ${#kept[@]} -eq 0 ]; then
  # Nothing to measure. A stack or retry the model asked for is passed on.
  move=$(sed -e 's/[*`]//g' "$last" | grep -m1 -E '^[[:space:]]*(STACK|RETRY):[[:space:]]*[0-9]')
  if [ -n "$move" ]; then
    echo "${move#"${move%%[![:space:]]*}"}"
    exit 0
  fi
  echo "HYPOTHESIS: codex with $MODEL changed no allowed file${hyp:+ (it said: $hyp)}"
elif [ -n "$hyp" ]; then
  echo "HYPOTHESIS: $hyp"
else
  echo "HYPOTHESIS: codex with $MODEL edited ${changes[*]} and stated no hypothesis"
fi
[ -n "$cat" ] && echo "CATEGORY: $cat"
exit 0
