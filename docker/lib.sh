# shellcheck shell=bash
# What the image scripts share: where the cache is, how they log, the apt mirror this machine
# uses, an image already built from the same inputs, a root file system from debootstrap and a
# .deb downloaded once. Sourced with SCRIPT set to the script's name; a script's inputs digest
# covers this file too (`script_digest`), so a change here rebuilds the images it makes.

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
state_dir="${AGENT_STATE_DIR:-$repo/.agent-state}"
case "$state_dir" in /*) ;; *) state_dir="$repo/$state_dir" ;; esac
cache_dir="${CACHE_DIR:-$state_dir/docker}"

log() { echo "$SCRIPT: $*" >&2; }
die() { echo "$SCRIPT: $*" >&2; exit 1; }

# The digest of the calling script and this file: part of every image's inputs.
script_digest() { cat "$1" "$here/lib.sh" | sha256sum | cut -d' ' -f1; }

require_engine() { docker info >/dev/null 2>&1 || die "docker engine not reachable; run docker/ensure-engine.sh first"; }

# Serialises builds of one kind: two at once would race on the tarball and the tag.
lock_cache() {
  mkdir -p "$cache_dir"
  exec 9>"$cache_dir/$1.lock"
  flock 9
}

# apt_mirror SUITE: the first mirror URI this machine's apt uses for SUITE (not its security
# suite), from one-line *.list files or deb822 *.sources files; files apt ignores are ignored here
# too.
apt_mirror() {
  local suite="$1" f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v suite="$suite" '
      $1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i+1) == suite) { print $i; exit }
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$suite" '
      function flush() { if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uris != "") { split(uris, u, " "); print u[1]; found = 1 } types = suites = uris = "" }
      /^[ \t]*$/ { flush(); if (found) exit; next }
      /^#/ { next }
      /^Types:/  { sub(/^Types:[ \t]*/, "");  types = $0 }
      /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
      /^URIs:/   { sub(/^URIs:[ \t]*/, "");   uris = $0 }
      END { if (!found) flush() }' "$f"
  done
}

# The mirror of SUITE, or a stop naming the files looked at.
suite_mirror() {
  local mirror
  mirror="$(apt_mirror "$1" | head -n 1)"
  [ -n "$mirror" ] || die "no apt source for suite '$1' found in /etc/apt/sources.list{,.d/*.list,.d/*.sources}"
  echo "$mirror"
}

# reuse_image DIGEST TAG: when an image made from these inputs exists, tags it TAG, prints its id
# and exits the script. Never a setup cache image, which may carry its base image's labels
# (images committed before setup images set their own).
reuse_image() {
  local id
  for id in $(docker images -q --no-trunc --filter "label=coding-agent.inputs=$1"); do
    if [ "$(docker image inspect -f '{{index .Config.Labels "coding-agent"}}' "$id")" != setup ]; then
      log "up to date (inputs $1)"
      docker tag "$id" "$2"
      docker image inspect -f '{{.Id}}' "$id"
      exit 0
    fi
  done
}

# cached_rootfs TARBALL DIGEST: true when TARBALL was made from these inputs.
cached_rootfs() {
  [ -f "$1" ] && [ -f "$1.inputs" ] && [ "$(sed -n 's/^digest=//p' "$1.inputs")" = "$2" ]
}

# debootstrap_rootfs ROOTFS SUITE VARIANT INCLUDE MIRROR: a root file system, debootstrap
# installed first when missing; package caches and lists dropped.
debootstrap_rootfs() {
  [ "$(id -u)" -eq 0 ] || die "debootstrap and chroot need root; run as root"
  if ! command -v debootstrap >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-cache policy debootstrap 2>/dev/null | grep -q 'Candidate: [0-9]' || apt-get update >&2
    apt-get install -y --no-install-recommends debootstrap >&2
  fi
  log "debootstrap $2 ($3, +$4) from $5"
  debootstrap --variant="$3" --include="$4" "$2" "$1" "$5" >&2
  rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/var/log/*.log
}

# save_rootfs ROOTFS TARBALL INPUTS DIGEST: the tarball and the inputs it was made from.
save_rootfs() {
  tar -C "$1" --numeric-owner --sort=name -cf "$2.tmp" .
  mv "$2.tmp" "$2"
  printf '%s\ndigest=%s\n' "$3" "$4" >"$2.inputs"
}

# cached_deb PACKAGE: the path of PACKAGE's .deb in the cache, downloaded from this machine's
# mirror the first time.
cached_deb() {
  local deb
  deb="$(ls "$cache_dir/$1"_*.deb 2>/dev/null | head -n 1 || true)"
  if [ -z "$deb" ]; then
    log "downloading $1 with apt-get"
    (cd "$cache_dir" && apt-get download "$1" >&2) || die "apt-get download $1 failed"
    deb="$(ls "$cache_dir/$1"_*.deb | head -n 1)"
  fi
  echo "$deb"
}

# derive_from_base TAG BASE PACKAGE: the start of an image made from the sandbox image BASE plus
# files of Debian's PACKAGE (docker create + cp + commit). Sets `deb` (the cached .deb), `digest`
# (BASE's id, the .deb and the calling script), `work` (a temporary folder) and `container` (empty
# until the caller creates one), both removed on exit; when TAG already carries that digest as its
# inputs label, prints TAG and exits.
derive_from_base() {
  local base_id
  require_engine
  base_id="$(docker image inspect -f '{{.Id}}' "$2" 2>/dev/null)" || die "no $2; build it with docker/build-image.sh"
  lock_cache "$SCRIPT"
  deb="$(cached_deb "$3")"
  digest="$( (echo "$base_id"; sha256sum "$deb" | cut -d' ' -f1; script_digest "$0") | sha256sum | cut -d' ' -f1)"
  if [ "$(docker image inspect -f '{{index .Config.Labels "coding-agent.inputs"}}' "$1" 2>/dev/null || true)" = "$digest" ]; then
    log "up to date"
    echo "$1"
    exit 0
  fi
  work="$(mktemp -d)"
  container=""
  trap 'rm -rf "$work"; [ -n "$container" ] && docker rm -f "$container" >/dev/null 2>&1 || true' EXIT
}
