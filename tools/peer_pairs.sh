#!/usr/bin/env bash
# Pairs of runs against the peers on one Redis, ours first, then the peer(s), alternating in one run.
#   tools/peer_pairs.sh latency|process100|process10|process1 [RUNS] [PORT]
# Needs a redis-server on 127.0.0.1:PORT (default 6390) that may be flushed: every run FLUSHALLs it.
# Prints per pair: ours, then bullmq-official (rs) and, for process, BullMQ on Node — jobs/s and Redis
# CPU µs per job, or p50 / p99 ms for latency; for process, then each pair's ratios (ours / theirs)
# and their medians. Builds `emq` (release) first. The peers' harnesses (each with a run.sh:
# bullmq-rs/, bullmq/, chasquimq/) are found in the directory EMQ_PEERS names.
# EMQ_PREFETCH=N runs ours with --prefetch N; EMQ_CHASQUI=tuned|defaults adds ChasquiMQ as a third
# peer with that profile (it needs a Redis >= 8.2: chasquimq/redis82.sh fetches one);
# EMQ_NODE=0 leaves BullMQ on Node out; N sets the jobs of every process run (100,000).
set -euo pipefail
mode=${1:?latency|process100|process10|process1}; runs=${2:-3}; port=${3:-6390}
root=$(cd "$(dirname "$0")/.." && pwd)
peers=${EMQ_PEERS:?set EMQ_PEERS to the directory of the peer harnesses (bullmq-rs/run.sh, bullmq/run.sh, chasquimq/run.sh)}
cargo build --release -q -p echomq-cli --manifest-path "$root/Cargo.toml"
emq=${CARGO_TARGET_DIR:-$root/target}/release/emq
field() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print($1)"; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
say() { echo "$1"; echo "$1" >> "$log"; }
for _ in $(seq "$runs"); do
  redis-cli -p "$port" flushall >/dev/null
  case $mode in
    latency)
      echo "ours $(EMQ_URL=redis://127.0.0.1:$port "$emq" bench latency 2>/dev/null | field 'd["p50_ms"], d["p99_ms"]')"
      echo "rs   $(REDIS_PORT=$port "$peers/bullmq-rs/run.sh" latency 2>/dev/null | field 'd["p50_ms"], d["p99_ms"]')"
      if [[ -n ${EMQ_CHASQUI:-} ]]; then
        echo "chasqui $(CHASQUI_PROFILE=$EMQ_CHASQUI REDIS_PORT=$port "$peers/chasquimq/run.sh" latency 2>/dev/null | field 'd["p50_ms"], d["p99_ms"]')"
      fi
      ;;
    process*)
      c=${mode#process}
      # each run starts on a settled machine: the run before it and its processes gone
      sleep 3
      say "ours $(EMQ_URL=redis://127.0.0.1:$port "$emq" bench process "$c" --jobs "${N:-100000}" --prefetch "${EMQ_PREFETCH:-0}" 2>/dev/null | field 'round(d["jobs_per_s"]), round(d["redis_cpu_us_per_job"], 1), round(d["worker_cpu_us_per_job"], 1), round(d["redis_cmds_per_job"], 1)')"
      sleep 3
      say "rs   $(REDIS_PORT=$port "$peers/bullmq-rs/run.sh" process "$c" remove 2>/dev/null | field 'round(d["jobs_per_s"]), round(d["redis_cpu_s"] * 1e6 / d["n"], 1), round(d["worker_cpu_pct"] / 100 * d["secs"] * 1e6 / d["n"], 1), round(d["redis_cmds_per_job"], 1)')"
      if [[ ${EMQ_NODE:-1} != 0 ]]; then
        sleep 3
        say "node $(REDIS_PORT=$port "$peers/bullmq/run.sh" process "$c" remove 2>/dev/null | field 'round(d["jobs_per_s"]), round(d["redis_cpu_s"] * 1e6 / d["n"], 1)')"
      else
        say "node -"
      fi
      if [[ -n ${EMQ_CHASQUI:-} ]]; then
        sleep 3
        say "chasqui $(CHASQUI_PROFILE=$EMQ_CHASQUI REDIS_PORT=$port "$peers/chasquimq/run.sh" process "$c" 2>/dev/null | field 'round(d["jobs_per_s"]), round(d["redis_cpu_s"] * 1e6 / d["n"], 1)')"
      else
        say "chasqui -"
      fi
      ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
done
if [[ $mode == process* ]]; then
  # the ratios of each pair, ours over each peer's jobs/s, and their medians
  python3 - "$log" <<'PY'
import statistics, sys
# four lines a run (ours, rs, node, chasqui), a run that failed or was left out with its value
# missing
runs = [l.split() for l in open(sys.argv[1])]
runs = [runs[i:i + 4] for i in range(0, len(runs) - 3, 4)]
def value(r):
    try:
        return float(r[1])
    except (IndexError, ValueError):
        return None
for k, name in ((1, "bullmq-official"), (2, "BullMQ"), (3, "ChasquiMQ")):
    ratios = [value(r[0]) / value(r[k]) for r in runs if value(r[0]) and value(r[k])]
    if ratios:
        print(f"vs {name}: " + ", ".join(f"{x:.2f}" for x in ratios) + f" (median {statistics.median(ratios):.2f}x)")
PY
fi
