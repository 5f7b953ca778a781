# shellcheck shell=bash
# apt_mirror SUITE: the first mirror URI this machine's apt uses for SUITE (not its security
# suite), from one-line *.list files or deb822 *.sources files; files apt ignores are ignored here
# too. Sourced by docker/build-proxy-image.sh. (docker/build-image.sh keeps its own copy: changing
# that script changes the sandbox image's inputs digest, which rebuilds the image.)
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
