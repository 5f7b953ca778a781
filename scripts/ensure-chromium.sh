#!/usr/bin/env bash
# Makes a headless browser available for the browser tests: Debian's `chromium`, installed with
# apt when missing (needs root). Prints the browser's path on stdout; progress goes to stderr.
# CHROMIUM_BIN, when set, names the browser to use instead.
set -euo pipefail

find_browser() {
  if [ -n "${CHROMIUM_BIN:-}" ]; then [ -x "$CHROMIUM_BIN" ] && echo "$CHROMIUM_BIN"; return; fi
  command -v chromium || command -v chromium-browser || true
}

bin="$(find_browser)"
if [ -z "$bin" ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-chromium: installing Debian's chromium" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends chromium >&2 || { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends chromium >&2; }
    bin="$(find_browser)"
  fi
fi
if [ -z "$bin" ]; then
  echo "ensure-chromium: no chromium found; install Debian's chromium package (as root: apt-get install chromium) or set CHROMIUM_BIN" >&2
  exit 1
fi
"$bin" --headless --no-sandbox --version >/dev/null 2>&1 || { echo "ensure-chromium: $bin does not start" >&2; exit 1; }
echo "$bin"
