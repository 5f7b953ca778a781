#!/usr/bin/env bash
# Build `coding-agent-git:1`: the sandbox image plus Debian's git, the image in which the harness
# reads a repository it does not trust (sandbox/git-sandbox.ts).
#
#   usage: docker/build-git-image.sh       (prints the image tag on stdout)
#
# Only git's own programs are added: /usr/bin/git and /usr/lib/git-core (the built-ins, which
# are links to it) and git's templates, taken from Debian's `git` package (`apt-get download`
# from this machine's mirror, cached in CACHE_DIR) without its dependencies. The transports that
# need libcurl (`git-remote-http`...) and the perl commands cannot start in this image, and
# nothing else in it can open a connection: a repository's configuration that asks for a fetch
# finds no way to make one. It is made with `docker create` + `docker cp` + `docker commit` from
# the local sandbox image: nothing comes from an image registry. Idempotent: the label
# `coding-agent.inputs` (the sandbox image id, the package, this script) tells an up-to-date image.
set -euo pipefail

TAG="${GIT_IMAGE_TAG:-coding-agent-git:1}"
BASE="${AGENT_SANDBOX_IMAGE:-coding-agent-sandbox:1}"
SCRIPT=build-git-image
# shellcheck source=docker/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

derive_from_base "$TAG" "$BASE" git
dpkg-deb -x "$deb" "$work/deb"
mkdir -p "$work/add/usr/bin" "$work/add/usr/lib" "$work/add/usr/share"
cp -a "$work/deb/usr/bin/git" "$work/add/usr/bin/git"
cp -a "$work/deb/usr/lib/git-core" "$work/add/usr/lib/git-core"
cp -a "$work/deb/usr/share/git-core" "$work/add/usr/share/git-core"
# The commands written in perl or needing libcurl are left out rather than left broken.
(cd "$work/add/usr/lib/git-core" && for f in *; do
  { [ -f "$f" ] && [ ! -L "$f" ]; } || continue
  head -c 2 "$f" | grep -q '#!' && rm -f "$f"
  case "$f" in git-remote-http* | git-remote-ftp* | git-http-* | git-imap-send) rm -f "$f" ;; esac
done)
container="$(docker create --network none "$BASE" /bin/true)"
tar -C "$work/add" --numeric-owner --owner=0 --group=0 -cf - . | docker cp - "$container:/"
docker commit -c "LABEL coding-agent.inputs=$digest" -c 'USER 10001:10001' -c 'CMD ["/bin/sh"]' "$container" "$TAG" >/dev/null
log "committed $TAG ($(basename "$deb"))"
docker run --rm --network none "$TAG" git --version >&2
echo "$TAG"
