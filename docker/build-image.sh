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
# Idempotent: an inputs digest (this script and docker/lib.sh, the node binary and version, the
# suite, the package list, the mirror) is stored as the image label `coding-agent.inputs`
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
SCRIPT=build-image
# shellcheck source=docker/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$(id -u)" -eq 0 ] || die "debootstrap and chroot need root; run as root"
require_engine
mirror="$(suite_mirror "$SUITE")"

node_bin="$(command -v node)" || die "node not found on PATH"
node_version="$("$node_bin" --version)"
node_sha="$(sha256sum "$node_bin" | cut -d' ' -f1)"
inputs="$(printf 'script=%s\nnode_version=%s\nnode_sha256=%s\nsuite=%s\nvariant=%s\ninclude=%s\nmirror=%s\nuid=%s\n' \
  "$(script_digest "${BASH_SOURCE[0]}")" "$node_version" "$node_sha" "$SUITE" "$VARIANT" "$INCLUDE" "$mirror" "$SANDBOX_UID")"
digest="$(printf '%s' "$inputs" | sha256sum | cut -d' ' -f1)"

lock_cache build
reuse_image "$digest" "$IMAGE_TAG"

tarball="$cache_dir/rootfs.tar"
if cached_rootfs "$tarball" "$digest"; then
  log "re-importing cached rootfs $tarball"
else
  work="$(mktemp -d "$cache_dir/build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  rootfs="$work/rootfs"
  debootstrap_rootfs "$rootfs" "$SUITE" "$VARIANT" "$INCLUDE" "$mirror"
  install -m 0755 "$node_bin" "$rootfs/usr/local/bin/node"
  chroot "$rootfs" /usr/sbin/groupadd -g "$SANDBOX_UID" sandbox
  chroot "$rootfs" /usr/sbin/useradd -u "$SANDBOX_UID" -g "$SANDBOX_UID" -M -d /tmp -s /usr/sbin/nologin sandbox
  install -d -m 0755 "$rootfs/workspace" "$rootfs/out" "$rootfs/acceptance"
  got="$(chroot "$rootfs" /usr/local/bin/node --version)"
  [ "$got" = "$node_version" ] || die "node in rootfs reports '$got', expected $node_version"
  chroot "$rootfs" /usr/bin/python3 -m pytest --version >&2
  save_rootfs "$rootfs" "$tarball" "$inputs" "$digest"
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
