#!/usr/bin/env bash
# YCSB workload A against a three-member cluster on the software device,
# with one copy of each slot and with two (synchronous backups), alternated
# RUNS times on the same cluster (kvs-admin set replicas switches, and waits
# until every slot has its copies). Two driver threads at depth 16; each
# figure is the median of RUNS runs, and the ratio is what to read on a
# shared machine.
#   bash scripts/bench-replicas.sh        (RECORDS, OPS, RUNS, WORKERS per
#   member to change; SERVER_CONFIG=kvs.toml gives the servers a config
#   file, e.g. idle settings)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
RECORDS=${RECORDS:-50000}
OPS=${OPS:-400000}
WORKERS=${WORKERS:-2}
cargo build -q --release -p ycsb-driver -p kvs-server -p kvs-admin
D=target/release/ycsb-driver
S=target/release/kvs-server
A=target/release/kvs-admin

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# report -> "throughput read-p50 read-p99 update-p50 update-p99"
pick() { awk '
  /Throughput/ {t=$3}
  $1=="[READ]," && $2=="50thPercentileLatency(us),"  {r50=$3}
  $1=="[READ]," && $2=="99thPercentileLatency(us),"  {r99=$3}
  $1=="[UPDATE]," && $2=="50thPercentileLatency(us),"  {u50=$3}
  $1=="[UPDATE]," && $2=="99thPercentileLatency(us),"  {u99=$3}
  END {print t, r50, r99, u50, u99}'; }

fabric="bench-replicas-$$"
root=$(mktemp -d)
base=$((17000 + RANDOM % 2000))
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$root" /dev/shm/mlx5sim-$fabric*; }
trap cleanup EXIT
for m in 0 1 2; do
  # Member 0 starts the cluster; the others join it.
  how=(--bootstrap)
  [ "$m" -gt 0 ] && how=(--join 127.0.0.1:$base)
  "$S" --listen 127.0.0.1:$((base + m)) --fabric "$fabric" --device sim1 --workers "$WORKERS" \
    --stats-interval 0 --data-dir "$root/m$m" "${how[@]}" ${SERVER_CONFIG:+--config "$SERVER_CONFIG"} >"$root/m$m.log" 2>&1 &
  pids+=($!)
  sleep 1
done
admin=("$A" --server 127.0.0.1:$base --fabric "$fabric" --device sim0)
"${admin[@]}" rebalance >/dev/null 2>&1
common=(-P workloada -p recordcount="$RECORDS" -p operationcount="$OPS" -threads 2 --depth 16
  --server 127.0.0.1:$base -p kvs.fabric="$fabric" -p kvs.device=sim0)
"$D" load "${common[@]}" >/dev/null 2>&1
declare -A res
for i in $(seq "$RUNS"); do
  for r in 1 2; do
    "${admin[@]}" set replicas "$r" >/dev/null 2>&1
    res[$r]+="$("$D" run "${common[@]}" 2>/dev/null | pick)"$'\n'
  done
done
echo "== YCSB-A, 3 members of $WORKERS workers, $RECORDS records, $OPS operations, 2 driver threads at depth 16; median of $RUNS, alternated"
for r in 1 2; do
  printf '%s\n' "${res[$r]}" | sed '/^$/d' >"$root/r$r"
  printf 'replicas = %s   %8.0f ops/s   READ p50 %4s p99 %5s us   UPDATE p50 %4s p99 %5s us\n' "$r" \
    "$(awk '{print $1}' "$root/r$r" | median)" "$(awk '{print $2}' "$root/r$r" | median)" \
    "$(awk '{print $3}' "$root/r$r" | median)" "$(awk '{print $4}' "$root/r$r" | median)" \
    "$(awk '{print $5}' "$root/r$r" | median)"
done
t1=$(awk '{print $1}' "$root/r1" | median); t2=$(awk '{print $1}' "$root/r2" | median)
echo "throughput ratio replicas 2 / 1: $(awk -v a="$t2" -v b="$t1" 'BEGIN {printf "%.2f", a/b}')"
