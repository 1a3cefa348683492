#!/usr/bin/env bash
# YCSB workloads A and C against the kvs store on the software device, one
# server worker and one driver thread: embedded (one process) and as two
# processes (kvs-server + ycsb-driver). Each figure is the median of RUNS runs.
#   bash scripts/bench-ycsb.sh        (RECORDS, OPS, DEPTHS, RUNS to change)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
RECORDS=${RECORDS:-100000}
OPS=${OPS:-1000000}
DEPTHS=${DEPTHS:-"1 16"}
cargo build -q --release -p ycsb-driver -p kvs-server
D=target/release/ycsb-driver
S=target/release/kvs-server

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# report -> "throughput p50 p99" of the named operation
pick() { awk -v op="[$1]," '
  /Throughput/ {t=$3}
  $1==op && $2=="50thPercentileLatency(us),"  {p50=$3}
  $1==op && $2=="99thPercentileLatency(us),"  {p99=$3}
  END {print t, p50, p99}'; }
row() { # label op -> median line from stdin runs (one "t p50 p99" per run)
  local f; f=$(mktemp); cat >"$f"
  printf '%-34s %10.0f ops/s   p50 %4s us   p99 %4s us\n' "$1" \
    "$(awk '{print $1}' "$f" | median)" "$(awk '{print $2}' "$f" | median)" "$(awk '{print $3}' "$f" | median)"
  rm -f "$f"
}

common=(-p recordcount="$RECORDS" -p operationcount="$OPS" -threads 1)
echo "== YCSB, $RECORDS records, $OPS operations, 1 driver thread, 1 server worker; median of $RUNS"
for w in a c; do
  op=READ
  for d in $DEPTHS; do
    for i in $(seq "$RUNS"); do
      "$D" run -P workload$w "${common[@]}" --depth "$d" 2>/dev/null | pick $op
    done | row "workload $w embedded, depth $d ($op)"
  done
done
fabric="bench-ycsb-$$"
port=$((17000 + RANDOM % 2000))
"$S" --listen 127.0.0.1:$port --fabric "$fabric" --stats-interval 0 >/dev/null 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null; rm -rf /dev/shm/mlx5sim-$fabric' EXIT
sleep 0.5
remote=(--server 127.0.0.1:$port -p kvs.fabric="$fabric" -p kvs.device=sim0)
"$D" load -P workloada "${common[@]}" "${remote[@]}" --depth 16 >/dev/null 2>&1
for w in a c; do
  for d in $DEPTHS; do
    for i in $(seq "$RUNS"); do
      "$D" run -P workload$w "${common[@]}" "${remote[@]}" --depth "$d" 2>/dev/null | pick READ
    done | row "workload $w two processes, depth $d (READ)"
  done
done

# Peer, same machine, same run: Redis (Debian's redis-server on loopback), the
# same workloads through ycsb-driver's Redis backend (Java YCSB's data model:
# a hash per record), one connection, pipelined to the same depth; and
# redis-benchmark's plain GET of 1000-byte values for reference.
if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
  rport=$((19000 + RANDOM % 1000))
  redis-server --port $rport --save "" --appendonly no --daemonize yes >/dev/null
  trap 'kill $srv 2>/dev/null; redis-cli -p $rport shutdown nosave >/dev/null 2>&1; rm -rf /dev/shm/mlx5sim-$fabric' EXIT
  sleep 0.5
  rr=(redis -p redis.port=$rport)
  "$D" load "${rr[@]}" -P workloada "${common[@]}" --depth 16 >/dev/null 2>&1
  for w in a c; do
    for d in $DEPTHS; do
      for i in $(seq "$RUNS"); do
        "$D" run "${rr[@]}" -P workload$w "${common[@]}" --depth "$d" 2>/dev/null | pick READ
      done | row "workload $w, Redis backend, depth $d (READ)"
    done
  done
  redis-benchmark -p $rport -t set -d 1000 -n "$RECORDS" -r "$RECORDS" -c 1 -P 16 -q >/dev/null 2>&1
  for d in $DEPTHS; do
    for i in $(seq "$RUNS"); do
      redis-benchmark -p $rport -t get -d 1000 -n 300000 -r "$RECORDS" -c 1 -P "$d" -q 2>/dev/null |
        tr '\r' '\n' | awk '/^GET:/ {t=$2; sub("p50=", "", $6); p=$6*1000} END {print t, p, "-"}'
    done | row "redis-benchmark GET, pipeline $d"
  done
else
  echo "(redis-server / redis-benchmark not installed: apt-get install redis-server)"
fi
