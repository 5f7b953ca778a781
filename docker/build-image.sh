#!/usr/bin/env bash
# Build the sandbox image `coding-agent-sandbox:1` from a debootstrap root file system.
#
#   usage: docker/build-image.sh            (prints the image content id, sha256:..., on stdout)
#
# Debian bookworm (minbase) + python3 + pytest, the host's `node` binary at
# /usr/local/bin/node, a non-root user `sandbox` (uid/gid 10001) and the mount points
# /workspace, /out and /acceptance. The Debian mirror is the one configured in this
# machine's apt sources; nothing is pulled from an image registry.
#
# Idempotent: an inputs digest (this script, the node binary and version, the suite,
# the package list, the mirror) is stored as the image label `coding-agent.inputs`
# and beside the cached rootfs tarball in CACHE_DIR
# (default: ${AGENT_STATE_DIR:-<repo>/.agent-state}/docker). With an image carrying that
# label present, nothing is built; with only the cached tarball present, it is re-imported.
# Progress goes to stderr; stdout carries only the image id.
set -euo pipefail

IMAGE_TAG="${IMAGE_TAG:-coding-agent-sandbox:1}"
SUITE=bookworm
VARIANT=minbase
INCLUDE="python3,python3-pytest"
SANDBOX_UID=10001

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
state_dir="${AGENT_STATE_DIR:-$repo/.agent-state}"
case "$state_dir" in /*) ;; *) state_dir="$repo/$state_dir" ;; esac
cache_dir="${CACHE_DIR:-$state_dir/docker}"

log() { echo "build-image: $*" >&2; }
die() { echo "build-image: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "debootstrap and chroot need root; run as root"
docker info >/dev/null 2>&1 || die "docker engine not reachable; run docker/ensure-engine.sh first"

# The first mirror URI that apt uses for "$SUITE" (not the security suite), from
# one-line *.list files or deb822 *.sources files. Files apt ignores are ignored here too.
apt_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v suite="$SUITE" '
      $1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i+1) == suite) { print $i; exit }
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$SUITE" '
      function flush() { if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uris != "") { split(uris, u, " "); print u[1]; found = 1 } types = suites = uris = "" }
      /^[ \t]*$/ { flush(); if (found) exit; next }
      /^#/ { next }
      /^Types:/  { sub(/^Types:[ \t]*/, "");  types = $0 }
      /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
      /^URIs:/   { sub(/^URIs:[ \t]*/, "");   uris = $0 }
      END { if (!found) flush() }' "$f"
  done
}
mirror="$(apt_mirror | head -n 1)"
[ -n "$mirror" ] || die "no apt source for suite '$SUITE' found in /etc/apt/sources.list{,.d/*.list,.d/*.sources}"

node_bin="$(command -v node)" || die "node not found on PATH"
node_version="$("$node_bin" --version)"
node_sha="$(sha256sum "$node_bin" | cut -d' ' -f1)"
script_sha="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"
inputs="$(printf 'script=%s\nnode_version=%s\nnode_sha256=%s\nsuite=%s\nvariant=%s\ninclude=%s\nmirror=%s\nuid=%s\n' \
  "$script_sha" "$node_version" "$node_sha" "$SUITE" "$VARIANT" "$INCLUDE" "$mirror" "$SANDBOX_UID")"
digest="$(printf '%s' "$inputs" | sha256sum | cut -d' ' -f1)"

mkdir -p "$cache_dir"
# Two concurrent builds would race on the tarball and the tag.
exec 9>"$cache_dir/build.lock"
flock 9

# An image made from these inputs; never a setup cache image, which may carry its base image's
# labels (images committed before setup images set their own).
existing=""
for id in $(docker images -q --no-trunc --filter "label=coding-agent.inputs=$digest"); do
  if [ "$(docker image inspect -f '{{index .Config.Labels "coding-agent"}}' "$id")" != setup ]; then
    existing="$id"
    break
  fi
done
if [ -n "$existing" ]; then
  log "up to date (inputs $digest)"
  docker tag "$existing" "$IMAGE_TAG"
  docker image inspect -f '{{.Id}}' "$existing"
  exit 0
fi

tarball="$cache_dir/rootfs.tar"
inputs_file="$cache_dir/rootfs.inputs"
if [ -f "$tarball" ] && [ -f "$inputs_file" ] && [ "$(sed -n 's/^digest=//p' "$inputs_file")" = "$digest" ]; then
  log "re-importing cached rootfs $tarball"
else
  if ! command -v debootstrap >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-cache policy debootstrap 2>/dev/null | grep -q 'Candidate: [0-9]' || apt-get update >&2
    apt-get install -y --no-install-recommends debootstrap >&2
  fi
  work="$(mktemp -d "$cache_dir/build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  rootfs="$work/rootfs"
  log "debootstrap $SUITE ($VARIANT, +$INCLUDE) from $mirror"
  debootstrap --variant="$VARIANT" --include="$INCLUDE" "$SUITE" "$rootfs" "$mirror" >&2

  install -m 0755 "$node_bin" "$rootfs/usr/local/bin/node"
  chroot "$rootfs" /usr/sbin/groupadd -g "$SANDBOX_UID" sandbox
  chroot "$rootfs" /usr/sbin/useradd -u "$SANDBOX_UID" -g "$SANDBOX_UID" -M -d /tmp -s /usr/sbin/nologin sandbox
  install -d -m 0755 "$rootfs/workspace" "$rootfs/out" "$rootfs/acceptance"
  # Package caches and lists are dead weight in a network-less sandbox.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  got="$(chroot "$rootfs" /usr/local/bin/node --version)"
  [ "$got" = "$node_version" ] || die "node in rootfs reports '$got', expected $node_version"
  chroot "$rootfs" /usr/bin/python3 -m pytest --version >&2

  tar -C "$rootfs" --numeric-owner --sort=name -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  printf '%s\ndigest=%s\n' "$inputs" "$digest" >"$inputs_file"
fi

id="$(docker import \
  --change "LABEL coding-agent.inputs=$digest" \
  --change "LABEL coding-agent.node=$node_version" \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "USER $SANDBOX_UID:$SANDBOX_UID" \
  --change 'WORKDIR /workspace' \
  --change 'CMD ["/bin/sh"]' \
  "$tarball" "$IMAGE_TAG")"
log "imported $id as $IMAGE_TAG"

# Check in the container itself, as the sandbox user, with no network.
got="$(docker run --rm --network none "$IMAGE_TAG" node --version)"
[ "$got" = "$node_version" ] || die "node in container reports '$got', expected $node_version"
docker run --rm --network none "$IMAGE_TAG" python3 -c 'import os, pytest; assert os.getuid() == 10001; print("python", pytest.__version__)' >&2

docker image inspect -f '{{.Id}}' "$IMAGE_TAG"
