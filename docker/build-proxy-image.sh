#!/usr/bin/env bash
# Build the egress proxy image `coding-agent-proxy:2` from a debootstrap root file system.
#
#   usage: docker/build-proxy-image.sh      (prints the image content id, sha256:..., on stdout)
#
# Debian bookworm (minbase) + Debian's squid built with OpenSSL (`squid-openssl`: the same squid,
# able to bump TLS for the HTTPS stretch) + openssl + ca-certificates + iptables. The harness runs
# it during a run's setup phase (sandbox/setup/proxy.ts) with a configuration it writes itself;
# nothing of Debian's default configuration is used. iptables is for the packet filter: a
# short-lived container of this image with NET_ADMIN, in the proxy's network namespace, installs
# the proxy's filter before squid starts (the proxy itself never has a capability). The Debian mirror is the one this machine's apt uses;
# nothing is pulled from an image registry.
#
# Idempotent like docker/build-image.sh: an inputs digest (this script and docker/lib.sh, the suite, the package
# list, the mirror) is the image label `coding-agent.inputs`; with such an image present nothing
# is built, and a cached rootfs tarball in CACHE_DIR (default
# ${AGENT_STATE_DIR:-<repo>/.agent-state}/docker) is re-imported. Progress goes to stderr.
set -euo pipefail

IMAGE_TAG="${PROXY_IMAGE_TAG:-coding-agent-proxy:2}"
SUITE=bookworm
VARIANT=minbase
INCLUDE="squid-openssl,openssl,ca-certificates,iptables"
SCRIPT=build-proxy-image
# shellcheck source=docker/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require_engine
mirror="$(suite_mirror "$SUITE")"
inputs="$(printf 'script=%s\nsuite=%s\nvariant=%s\ninclude=%s\nmirror=%s\n' "$(script_digest "${BASH_SOURCE[0]}")" "$SUITE" "$VARIANT" "$INCLUDE" "$mirror")"
digest="$(printf '%s' "$inputs" | sha256sum | cut -d' ' -f1)"

lock_cache build-proxy
reuse_image "$digest" "$IMAGE_TAG"

tarball="$cache_dir/proxy-rootfs.tar"
if cached_rootfs "$tarball" "$digest"; then
  log "re-importing cached rootfs $tarball"
else
  work="$(mktemp -d "$cache_dir/build-proxy.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  rootfs="$work/rootfs"
  # Debian's configuration, caches and logs are not used: the harness gives squid its own.
  debootstrap_rootfs "$rootfs" "$SUITE" "$VARIANT" "$INCLUDE" "$mirror"
  chroot "$rootfs" /usr/sbin/squid -v | head -n 1 >&2
  chroot "$rootfs" /usr/sbin/squid -v | grep -q -- '--with-openssl' || die "squid in the rootfs is not built with OpenSSL"
  [ -x "$rootfs/usr/lib/squid/security_file_certgen" ] || die "security_file_certgen missing from the rootfs"
  chroot "$rootfs" iptables-restore --version >&2 || die "iptables-restore missing from the rootfs"
  chroot "$rootfs" ip6tables-restore --version >/dev/null || die "ip6tables-restore missing from the rootfs"
  save_rootfs "$rootfs" "$tarball" "$inputs" "$digest"
fi

id="$(docker import \
  --change "LABEL coding-agent.inputs=$digest" \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'USER proxy' \
  --change 'CMD ["/usr/sbin/squid", "-v"]' \
  "$tarball" "$IMAGE_TAG")"
log "imported $id as $IMAGE_TAG"
docker run --rm --network none "$IMAGE_TAG" /usr/sbin/squid -v | head -n 1 >&2
docker image inspect -f '{{.Id}}' "$IMAGE_TAG"
