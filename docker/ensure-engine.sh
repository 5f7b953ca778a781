#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine; start one if needed.
#
# Idempotent: exits 0 at once when `docker info` already answers. Otherwise installs
# Debian's docker.io (only when `dockerd` is missing), starts `dockerd` in the
# background and waits up to ENGINE_WAIT_S seconds (default 60) for it to answer.
#
#   usage: docker/ensure-engine.sh [STATE_DIR]
#   STATE_DIR (default: $AGENT_STATE_DIR/docker, else /tmp/coding-agent-docker) holds
#   dockerd.log and dockerd.pid. It is never inside the repository by default.
#   DOCKERD_EXTRA_ARGS: extra words passed to dockerd (e.g. "--iptables=false").
set -euo pipefail

state_dir="${1:-${AGENT_STATE_DIR:+$AGENT_STATE_DIR/docker}}"
state_dir="${state_dir:-/tmp/coding-agent-docker}"
wait_s="${ENGINE_WAIT_S:-60}"

engine_answers() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_answers && command -v ip >/dev/null 2>&1; then
  echo "docker engine: already running"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "docker engine is not reachable and starting one needs root; run this script as root" >&2
  exit 1
fi

# iproute2's `ip` lists the host's interface addresses for the docker suite's network checks.
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  # Refresh the package lists only when apt knows no candidate for docker.io.
  if ! apt-cache policy docker.io 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    apt-get update
  fi
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
if engine_answers; then
  echo "docker engine: already running"
  exit 0
fi

mkdir -p "$state_dir"
log="$state_dir/dockerd.log"
pidfile="$state_dir/dockerd.pid"

# A dockerd we started earlier may still be coming up: do not start a second one.
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "docker engine: dockerd (pid $(cat "$pidfile")) already started, waiting for it"
else
  # Without systemd, dockerd needs containerd on PATH (docker.io ships it) and
  # starts its own managed containerd.
  # shellcheck disable=SC2086
  setsid nohup dockerd ${DOCKERD_EXTRA_ARGS:-} >>"$log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  echo "docker engine: started dockerd (pid $!), log: $log"
fi

for _ in $(seq 1 "$wait_s"); do
  if engine_answers; then
    echo "docker engine: ready ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
    exit 0
  fi
  if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "dockerd exited; last lines of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  sleep 1
done

echo "docker engine did not answer within ${wait_s}s; last lines of $log:" >&2
tail -n 30 "$log" >&2
exit 1
