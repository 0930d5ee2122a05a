#!/usr/bin/env bash
# A local Redis Cluster (or Valkey Cluster) on loopback, for tests and benchmarks.
#
#   tools/cluster.sh SERVER MASTERS REPLICAS DIR [OWNER_PID]
#
# starts MASTERS * (1 + REPLICAS) nodes of the server binary SERVER (redis-server or valkey-server)
# on free loopback ports below 55535 (each node also listens on its port + 10000, the cluster bus),
# each with `--cluster-enabled yes --cluster-node-timeout 2000`, no persistence, its files under DIR;
# joins them with `redis-cli --cluster create`, waits for `cluster_state:ok` on every node and for
# every replica's `master_link_status:up` (a replica that never synced is not promoted); then
# prints one line, the cluster's URL `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…`, and returns.
#
# The nodes are stopped by their own PIDs (listed in DIR/pids, one `PID PORT` per line: the PID of
# the `timeout` bounding each node, which stops its server with it) by a watchdog: when OWNER_PID
# (default: the caller's parent) is gone, after 60 minutes in any case, or when DIR/stop appears.
# `tools/cluster.sh stop DIR` stops them now. DIR/servers lists each server's own `PID PORT`, for
# a test that kills one (`kill -9` of its bounding `timeout` would leave the server running).
set -euo pipefail

if [ "${1:-}" = "stop" ]; then
  dir=$2
  touch "$dir/stop"
  while read -r pid _; do kill "$pid" 2>/dev/null || true; done <"$dir/pids"
  exit 0
fi

[ $# -ge 4 ] || { echo "usage: tools/cluster.sh SERVER MASTERS REPLICAS DIR [OWNER_PID] | stop DIR" >&2; exit 2; }
server=$1 masters=$2 replicas=$3 dir=$4 owner=${5:-$PPID}
command -v "$server" >/dev/null 2>&1 || { echo "tools/cluster.sh: no server program $server" >&2; exit 2; }
case "$masters$replicas" in *[!0-9]*) echo "tools/cluster.sh: MASTERS and REPLICAS are numbers" >&2; exit 2;; esac
[ "$masters" -ge 3 ] || { echo "tools/cluster.sh: a cluster needs at least 3 masters" >&2; exit 2; }
mkdir -p "$dir"
: >"$dir/pids"
count=$(( masters * (1 + replicas) ))

# the kernel's ephemeral ports (the local ports of outgoing connections: a busy test suite takes
# thousands) are avoided, or one might take a node's port between the check and the bind
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$ephemeral_low" -gt 21000 ] 2>/dev/null || ephemeral_low=32768

# a free port P below the ephemeral range with P + 10000 free too: nothing answers on either
free_port() {
  local p span=$(( ephemeral_low - 10000 - 11000 ))
  for _ in $(seq 1 100); do
    p=$(( 11000 + RANDOM % span ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null \
      && ! (exec 3<>"/dev/tcp/127.0.0.1/$(( p + 10000 ))") 2>/dev/null \
      && ! grep -q " $p\$" "$dir/pids"; then
      echo "$p"; return 0
    fi
  done
  echo "tools/cluster.sh: no free loopback port found" >&2
  return 1
}

fail() {
  echo "tools/cluster.sh: $1" >&2
  for p in "${ports[@]}"; do tail -n 5 "$dir/node-$p/server.log" >&2 2>/dev/null || true; done
  touch "$dir/stop"
  while read -r pid _; do kill "$pid" 2>/dev/null || true; done <"$dir/pids"
  exit 1
}

# the watchdog: stops every node by its PID once the owner is gone (or on `stop`)
(
  end=$(( $(date +%s) + 3600 ))
  while kill -0 "$owner" 2>/dev/null && [ ! -e "$dir/stop" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
  while read -r pid _; do kill "$pid" 2>/dev/null || true; done <"$dir/pids"
) </dev/null >/dev/null 2>&1 &

# each node on a port of its own; a node that finds its port taken after all exits, and is
# started again on another
ports=()
for i in $(seq 1 "$count"); do
  started=""
  for _ in 1 2 3 4 5; do
    port=$(free_port)
    node="$dir/node-$port"
    mkdir -p "$node"
    timeout 3600 "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$node" \
      --cluster-enabled yes --cluster-config-file "$node/nodes.conf" --cluster-node-timeout 2000 \
      --daemonize no >"$node/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 200); do
      redis-cli -p "$port" ping >/dev/null 2>&1 && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null && redis-cli -p "$port" ping >/dev/null 2>&1; then
      echo "$pid $port" >>"$dir/pids"
      ports+=("$port")
      started=1
      break
    fi
    kill "$pid" 2>/dev/null || true
    echo "tools/cluster.sh: node on port $port did not start; trying another port" >&2
  done
  [ -n "$started" ] || fail "a node did not start on any of 5 ports"
done

# each port is served by the node this script started (another process that took the port first
# would be answering, and ours would have exited)
: >"$dir/servers"
while read -r pid port; do
  serving=$(redis-cli -p "$port" info server | tr -d '\r' | sed -n 's/^process_id://p')
  [ "$(ps -o ppid= -p "$serving" | tr -d ' ')" = "$pid" ] || fail "port $port is served by another process"
  echo "$serving $port" >>"$dir/servers"
done <"$dir/pids"

addrs=()
for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1 \
  || { cat "$dir/create.log" >&2; fail "redis-cli --cluster create failed"; }

for _ in $(seq 1 1200); do
  ok=1
  for p in "${ports[@]}"; do
    redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || { ok=0; break; }
    if redis-cli -p "$p" info replication 2>/dev/null | grep -q '^role:slave'; then
      redis-cli -p "$p" info replication | grep -q '^master_link_status:up' || { ok=0; break; }
    fi
  done
  [ "$ok" = 1 ] && break
  sleep 0.05
done
[ "$ok" = 1 ] || fail "the cluster did not reach cluster_state:ok with every replica in sync"

seeds=$(IFS=,; echo "${addrs[*]}")
echo "redis+cluster://$seeds"
