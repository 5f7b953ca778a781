#!/usr/bin/env bash
# Makes Prometheus's `promtool` available for the metrics test, which checks the worker's /metrics
# output with `promtool check metrics`: Debian's `prometheus` package, installed with apt when
# missing (needs root; the package's service is not started, there is no init system to start it).
# Prints promtool's path on stdout; progress goes to stderr. PROMTOOL_BIN, when set, names another.
set -euo pipefail

find_promtool() {
  if [ -n "${PROMTOOL_BIN:-}" ]; then [ -x "$PROMTOOL_BIN" ] && echo "$PROMTOOL_BIN"; return; fi
  command -v promtool || true
}

bin="$(find_promtool)"
if [ -z "$bin" ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-promtool: installing Debian's prometheus (for promtool)" >&2
    export DEBIAN_FRONTEND=noninteractive
    # policy-rc.d 101: the package's maintainer scripts must not start the Prometheus server here.
    if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && trap 'rm -f /usr/sbin/policy-rc.d' EXIT; fi
    apt-get install -y -qq --no-install-recommends prometheus >&2 || { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends prometheus >&2; }
    bin="$(find_promtool)"
  fi
fi
if [ -z "$bin" ]; then
  echo "ensure-promtool: no promtool found; install Debian's prometheus package (as root: apt-get install prometheus) or set PROMTOOL_BIN" >&2
  exit 1
fi
"$bin" --version >/dev/null 2>&1 || { echo "ensure-promtool: $bin does not start" >&2; exit 1; }
echo "$bin"
