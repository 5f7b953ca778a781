#!/usr/bin/env bash
# Build images with no Python at all: a root file system of Debian's busybox-static (a POSIX sh
# and core utilities, one static binary) and nothing else, imported with `docker import`. The
# tests use them to show the isolation probe on an image that only has a shell.
#
#   usage: docker/build-shell-image.sh     (prints the two image tags on stdout)
#
#   coding-agent-shell:1      busybox with a link for each applet: sh, cat, nc, sleep, ...
#   coding-agent-noshell:1    the busybox binary alone, no link: neither python3 nor sh runs
#
# The .deb comes from the mirror this machine's apt uses (`apt-get download`), cached in
# CACHE_DIR (default ${AGENT_STATE_DIR:-<repo>/.agent-state}/docker); nothing is pulled from an
# image registry. Idempotent: images that exist are kept.
set -euo pipefail

FULL=coding-agent-shell:1
NOSHELL=coding-agent-noshell:1
SCRIPT=build-shell-image
# shellcheck source=docker/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_engine
if docker image inspect "$FULL" >/dev/null 2>&1 && docker image inspect "$NOSHELL" >/dev/null 2>&1; then
  log "up to date"
  printf '%s\n%s\n' "$FULL" "$NOSHELL"
  exit 0
fi

lock_cache build-shell
deb="$(cached_deb busybox-static)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$deb" "$work/deb"
build() {
  local tag="$1" links="$2" root="$work/root-${1//[:\/]/-}"
  mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/workspace" "$root/out" "$root/acceptance"
  chmod 1777 "$root/tmp"
  cp "$work/deb/bin/busybox" "$root/bin/busybox"
  # Links made by hand: `busybox --install` would write into this machine's /bin.
  if [ "$links" = yes ]; then
    for applet in $("$root/bin/busybox" --list); do
      [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
    done
  fi
  printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:10001:10001:sandbox:/tmp:/bin/sh\n' >"$root/etc/passwd"
  tar -C "$root" -c . | docker import --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$tag" >/dev/null
  log "imported $tag"
}
build "$FULL" yes
build "$NOSHELL" no
printf '%s\n%s\n' "$FULL" "$NOSHELL"
