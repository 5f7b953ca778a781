#!/usr/bin/env bash
# Makes the container backend usable on this machine: a Docker engine that answers (installing
# Debian's docker.io and starting dockerd when needed) and the sandbox image built from
# debootstrap (reused when its inputs have not changed), the setup phase's egress proxy image
# (docker/build-proxy-image.sh: squid from debootstrap), the image untrusted repositories are
# read in (docker/build-git-image.sh: the sandbox image plus git), and the images only tests use: the
# Python-less busybox images of the shell-probe tests (docker/build-shell-image.sh) and the
# sandbox image with pip of the setup tests (docker/build-pip-image.sh). For CI before
# `npm test`, and for users.
#
#   usage: scripts/ensure-docker.sh
#   stdout: only the image's content id (sha256:...); progress goes to stderr.
#   Needs root when no engine answers or the image must be built. Fails (non-zero) rather than
#   letting the docker tests skip: they need the engine and the image.
set -euo pipefail
cd "$(dirname "$0")/.."

bash docker/ensure-engine.sh >&2
id="$(bash docker/build-image.sh)"
case "$id" in
  sha256:*) ;;
  *) echo "ensure-docker: docker/build-image.sh printed no image id (got '$id')" >&2; exit 1 ;;
esac
bash docker/build-proxy-image.sh >/dev/null
bash docker/build-git-image.sh >/dev/null
bash docker/build-shell-image.sh >&2
bash docker/build-pip-image.sh >&2
echo "$id"
