# The isolation probe for an image without Python: POSIX sh, and of the image only `cat`, `nc`
# and `sleep` (sandbox/probe/isolation.ts runs it when python3 is missing).
#
# Run as `sh -c <this file's text> probe <pids_bound> <memory_bound> <host:port>...`. It reports
# raw facts, one per line or as whole files between `@@ file <path>` and `@@ end`; the parsing
# (sandbox/probe/probe-shell.ts) and the verdicts are made on the host, with the same
# judge as the Python probe. It tries the same things that must fail: connections to the host
# listener's addresses only, writes to the read-only mounts, a bounded fork loop, a bounded
# allocation. Routes, sockets and resolvers are read, never used.
#
# Hazard: this shell is the container's process 1. The fork loop runs last, in a subshell that
# kills its children when a fork fails, because nothing reaps them afterwards.

pids_bound=$1
memory_bound=$2
shift 2

missing=
for tool in cat nc sleep; do
  command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
echo "@@ missing$missing"

dump() {
  if [ -r "$1" ]; then
    echo "@@ file $1"
    cat "$1"
    echo
    echo "@@ end"
  else
    echo "@@ unreadable $1"
  fi
}

for target in "$@"; do
  if command -v nc >/dev/null 2>&1; then
    out=$(nc -w 2 "${target%:*}" "${target##*:}" </dev/null 2>&1)
    echo "@@ net $target $? $out"
  fi
done

for iface in /sys/class/net/*; do
  [ -e "$iface" ] && echo "@@ iface ${iface##*/}"
done
for f in /proc/net/route /proc/net/ipv6_route /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6 /etc/resolv.conf; do
  [ -e "$f" ] && dump "$f"
done

for path in /probe /usr/probe /workspace/probe /out/probe; do
  if err=$( (: >"$path") 2>&1 ); then
    echo "@@ write $path written"
  else
    echo "@@ write $path refused $err"
  fi
done

dump /proc/self/environ
dump /proc/1/environ
for sock in /var/run/docker.sock /run/docker.sock; do
  if [ -e "$sock" ]; then echo "@@ sock $sock yes"; else echo "@@ sock $sock no"; fi
done
dump /proc/self/mountinfo
dump /proc/self/status

# Bounded allocation in a subshell, which volunteers as the OOM killer's first choice: the
# string doubles until the memory limit stops it (or the bound is reached).
(
  echo 1000 >/proc/self/oom_score_adj 2>/dev/null
  x=0123456789abcdef
  n=16
  while [ "$n" -lt "$memory_bound" ]; do
    x="$x$x"
    n=$((n * 2))
    echo "@@ alloc $n"
  done
  echo "@@ alloc bound"
)
echo "@@ alloc rc $?"

# Bounded fork loop, last (see the header): children sleep until the subshell kills them.
if command -v sleep >/dev/null 2>&1; then
  (
    kids=
    trap 'kill $kids 2>/dev/null' EXIT
    n=0
    while [ "$n" -lt "$pids_bound" ]; do
      sleep 60 &
      kids="$kids $!"
      n=$((n + 1))
      echo "@@ forked $n"
    done
    echo "@@ forked bound"
  ) 2>&1
fi
echo "@@ done"
