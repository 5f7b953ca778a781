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
# Idempotent like docker/build-image.sh: an inputs digest (this script, the suite, the package
# list, the mirror) is the image label `coding-agent.inputs`; with such an image present nothing
# is built, and a cached rootfs tarball in CACHE_DIR (default
# ${AGENT_STATE_DIR:-<repo>/.agent-state}/docker) is re-imported. Progress goes to stderr.
set -euo pipefail

IMAGE_TAG="${PROXY_IMAGE_TAG:-coding-agent-proxy:2}"
SUITE=bookworm
VARIANT=minbase
INCLUDE="squid-openssl,openssl,ca-certificates,iptables"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
state_dir="${AGENT_STATE_DIR:-$repo/.agent-state}"
case "$state_dir" in /*) ;; *) state_dir="$repo/$state_dir" ;; esac
cache_dir="${CACHE_DIR:-$state_dir/docker}"

log() { echo "build-proxy-image: $*" >&2; }
die() { echo "build-proxy-image: $*" >&2; exit 1; }

docker info >/dev/null 2>&1 || die "docker engine not reachable; run docker/ensure-engine.sh first"

# shellcheck source=docker/apt-mirror.sh
. "$here/apt-mirror.sh"
mirror="$(apt_mirror "$SUITE" | head -n 1)"
[ -n "$mirror" ] || die "no apt source for suite '$SUITE' found in /etc/apt/sources.list{,.d/*.list,.d/*.sources}"

script_sha="$(cat "${BASH_SOURCE[0]}" "$here/apt-mirror.sh" | sha256sum | cut -d' ' -f1)"
inputs="$(printf 'script=%s\nsuite=%s\nvariant=%s\ninclude=%s\nmirror=%s\n' "$script_sha" "$SUITE" "$VARIANT" "$INCLUDE" "$mirror")"
digest="$(printf '%s' "$inputs" | sha256sum | cut -d' ' -f1)"

mkdir -p "$cache_dir"
exec 9>"$cache_dir/build-proxy.lock"
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

tarball="$cache_dir/proxy-rootfs.tar"
inputs_file="$cache_dir/proxy-rootfs.inputs"
if [ -f "$tarball" ] && [ -f "$inputs_file" ] && [ "$(sed -n 's/^digest=//p' "$inputs_file")" = "$digest" ]; then
  log "re-importing cached rootfs $tarball"
else
  [ "$(id -u)" -eq 0 ] || die "debootstrap and chroot need root; run as root"
  if ! command -v debootstrap >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-cache policy debootstrap 2>/dev/null | grep -q 'Candidate: [0-9]' || apt-get update >&2
    apt-get install -y --no-install-recommends debootstrap >&2
  fi
  work="$(mktemp -d "$cache_dir/build-proxy.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  rootfs="$work/rootfs"
  log "debootstrap $SUITE ($VARIANT, +$INCLUDE) from $mirror"
  debootstrap --variant="$VARIANT" --include="$INCLUDE" "$SUITE" "$rootfs" "$mirror" >&2
  # Debian's configuration, caches and logs are not used: the harness gives squid its own.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  chroot "$rootfs" /usr/sbin/squid -v | head -n 1 >&2
  chroot "$rootfs" /usr/sbin/squid -v | grep -q -- '--with-openssl' || die "squid in the rootfs is not built with OpenSSL"
  [ -x "$rootfs/usr/lib/squid/security_file_certgen" ] || die "security_file_certgen missing from the rootfs"
  chroot "$rootfs" iptables-restore --version >&2 || die "iptables-restore missing from the rootfs"
  chroot "$rootfs" ip6tables-restore --version >/dev/null || die "ip6tables-restore missing from the rootfs"
  tar -C "$rootfs" --numeric-owner --sort=name -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  printf '%s\ndigest=%s\n' "$inputs" "$digest" >"$inputs_file"
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
