#!/usr/bin/env bash
# Re-replication rate on the software device: three kvs-server processes
# holding YCSB records (RECORDS of ~1 KB, one copy of each slot), then
# `kvs-admin set replicas 2 --wait` gives every slot a backup, each copied
# from a snapshot pulled over mpib (both rails) while the store serves;
# timed to the moment the group counts every copy ready. Then back to one
# copy, RUNS times; the median is printed beside mpib's raw bandwidth on
# two software rails and memcpy, measured in the same run.
#   bash scripts/bench-rereplication.sh        (RECORDS, RUNS to change)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
RECORDS=${RECORDS:-200000}
cargo build -q --release -p ycsb-driver -p kvs-server -p kvs-admin -p mpib
D=target/release/ycsb-driver
S=target/release/kvs-server
A=target/release/kvs-admin

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

fabric="bench-rerepl-$$"
root=$(mktemp -d)
base=$((19000 + RANDOM % 2000))
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$root" /dev/shm/mlx5sim-$fabric*; }
trap cleanup EXIT
for m in 0 1 2; do
  # Member 0 starts the cluster; the others join it.
  how=(--bootstrap)
  [ "$m" -gt 0 ] && how=(--join 127.0.0.1:$base)
  "$S" --listen 127.0.0.1:$((base + m)) --fabric "$fabric" --device sim1 --workers 2 \
    --stats-interval 0 --data-dir "$root/m$m" "${how[@]}" >"$root/m$m.log" 2>&1 &
  pids+=($!)
  sleep 1
done
admin=("$A" --server 127.0.0.1:$base --fabric "$fabric" --device sim0)
"${admin[@]}" rebalance >/dev/null 2>&1
"$D" load -P workloada -p recordcount="$RECORDS" -threads 2 --depth 16 \
  --server 127.0.0.1:$base -p kvs.fabric="$fabric" -p kvs.device=sim0 >/dev/null 2>&1
# Bytes of keys and values held (one copy of each record).
bytes=$("${admin[@]}" status --json | python3 -c 'import json,sys; print(sum(m["bytes"] or 0 for m in json.load(sys.stdin)["members"]))')
rates=()
for i in $(seq "$RUNS"); do
  "${admin[@]}" set replicas 1 --wait >/dev/null
  t0=$(date +%s.%N)
  "${admin[@]}" set replicas 2 --wait >/dev/null
  t1=$(date +%s.%N)
  rate=$(python3 -c "print(f'{$bytes / ($t1 - $t0) / 1e6:.1f}')")
  echo "run $i: $(python3 -c "print(f'{$t1 - $t0:.3f}')") s for $((bytes >> 20)) MiB: $rate MB/s"
  rates+=("$rate")
done
copy=$(printf '%s\n' "${rates[@]}" | median)
raw=$(cargo run -q --release -p mpib --bin mpib-bench -- --spawn --sizes 1M --duration 1 2>&1)
mpib=$(echo "$raw" | awk '/^1048576 B:/ {print $3}')
memcpy=$(echo "$raw" | awk '/^memcpy/ {print $4}')
echo
echo "re-replication (median of $RUNS): $copy MB/s"
echo "mpib raw, two software rails, 1 MiB messages: $mpib GB/s"
echo "memcpy, 1 MiB: $memcpy GB/s"
python3 -c "print(f'ratio re-replication / mpib raw: {$copy / 1e3 / $mpib:.3f}')"
