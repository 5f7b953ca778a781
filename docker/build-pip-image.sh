#!/usr/bin/env bash
# Build `coding-agent-sandbox-pip:1`: the sandbox image plus pip, for the setup-phase tests.
#
#   usage: docker/build-pip-image.sh       (prints the image tag on stdout)
#
# The sandbox image (docker/build-image.sh) has python3 and pytest but no pip, and it stays that
# way: a run's tests need no installer. This image adds Debian's pip wheel (`python3-pip-whl`,
# fetched with `apt-get download` from this machine's mirror, cached in CACHE_DIR) at
# /usr/local/lib/pip.whl and a `pip` command that runs it (`python3 pip.whl/pip`, pip's own way
# to run from its wheel). It is made with `docker create` + `docker cp` + `docker commit` from the
# local sandbox image: nothing comes from an image registry. Idempotent: the label
# `coding-agent.inputs` (the sandbox image id, the wheel, this script) tells an up-to-date image.
set -euo pipefail

TAG="${PIP_IMAGE_TAG:-coding-agent-sandbox-pip:1}"
BASE="${AGENT_SANDBOX_IMAGE:-coding-agent-sandbox:1}"
SCRIPT=build-pip-image
# shellcheck source=docker/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

derive_from_base "$TAG" "$BASE" python3-pip-whl
dpkg-deb -x "$deb" "$work/deb"
wheel="$(ls "$work"/deb/usr/share/python-wheels/pip-*.whl | head -n 1)"
[ -f "$wheel" ] || die "no pip wheel in $deb"
cp "$wheel" "$work/pip.whl"
printf '#!/bin/sh\nexec python3 /usr/local/lib/pip.whl/pip "$@"\n' >"$work/pip"
chmod 0644 "$work/pip.whl"
chmod 0755 "$work/pip"
container="$(docker create --network none "$BASE" /bin/true)"
docker cp "$work/pip.whl" "$container:/usr/local/lib/pip.whl"
docker cp "$work/pip" "$container:/usr/local/bin/pip"
docker commit -c "LABEL coding-agent.inputs=$digest" -c 'USER 10001:10001' -c 'CMD ["/bin/sh"]' "$container" "$TAG" >/dev/null
log "committed $TAG ($(basename "$wheel"))"
docker run --rm --network none "$TAG" pip --version >&2
echo "$TAG"
