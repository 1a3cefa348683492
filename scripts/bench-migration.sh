#!/usr/bin/env bash
# Live migration on the software device, beside its peers in the same run:
#  1. the migration rate (MB/s of keys and values) of half the slots of a
#     loaded member moving to another and back, next to mpib's raw bandwidth
#     on the same two rails (sim2, sim3) with the migration's batch size and
#     window (1 MiB, 4 in flight);
#  2. the same with the device's link model on (LINK Gbit/s per rail);
#  3. YCSB workload A throughput and p99 before, during and after a
#     migration of half the slots;
# and Rocksteady's published figures beside them (they are quoted, not run:
# RAMCloud needs DPDK NICs). Each rate is the median of RUNS migrations.
#
#   bash scripts/bench-migration.sh
#   RECORDS=400000 RUNS=5 LINK=4 bash scripts/bench-migration.sh
#   YCSB_ONLY=1 bash scripts/bench-migration.sh     # part 3 alone
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
RECORDS=${RECORDS:-200000}      # 1000-byte values: 200 MB
LINK=${LINK:-4}                 # Gbit/s per rail for the link-model run
YCSB_SECS=${YCSB_SECS:-24}
cargo build -q --release -p kvs-server -p kvs-admin -p ycsb-driver -p mpib --bin kvs-server \
  --bin kvs-admin --bin ycsb-driver --bin mpib-bench
S=target/release/kvs-server
A=target/release/kvs-admin
D=target/release/ycsb-driver
M=target/release/mpib-bench
# As in bench-mpib.sh: glibc's `rep movsb` is ~30x slower than its vector
# loop on the VMs this runs on, and every copy of the software device's DMA
# would measure the hypervisor.
if [ -z "${MPIB_BENCH_KEEP_REP_MOVSB:-}" ]; then
  export GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=4294967295
fi

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "nan"}'; }
T=$(mktemp -d /tmp/bench-migration.XXXXXX)
PIDS=()
# The software device's fabrics (shared memory) go with the run, as the
# scratch dir does.
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$T" /dev/shm/mlx5sim-bench-mig-$$* /dev/shm/mlx5sim-bench-mig-link-$$*
}
trap cleanup EXIT

# start_server NAME FABRIC PORT [JOIN] -> waits for "listening on"
start_server() {
  local name=$1 fabric=$2 port=$3 join=${4:-}
  local args=(--listen "127.0.0.1:$port" --workers 2 --fabric "$fabric" --stats-interval 0)
  [ -n "$join" ] && args+=(--join "$join")
  "$S" "${args[@]}" >"$T/$name.out" 2>"$T/$name.err" &
  PIDS+=($!)
  for _ in $(seq 300); do
    grep -q "listening on" "$T/$name.out" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$name did not start:"; cat "$T/$name.err"; exit 1
}
admin() { "$A" --server "127.0.0.1:$P0" --fabric "$F" --device sim0 "$@"; }
# One migration; prints "MB/s seconds MB".
migrate() {
  admin migrate --slots "$1" --to "$2" >/dev/null 2>&1
  admin status --json | python3 -c '
import json, sys
m = json.load(sys.stdin)["migration"]
print("%.1f %.3f %.1f" % (m["bytes"] / 1e6 / m["seconds"], m["seconds"], m["bytes"] / 1e6))'
}
# A cluster of two on fabric $F, loaded with $RECORDS records.
cluster() {
  F=$1; P0=$((20000 + RANDOM % 20000)); P1=$((P0 + 1))
  start_server a "$F" "$P0"
  start_server b "$F" "$P1" "127.0.0.1:$P0"
  "$D" load -P workloada -p recordcount="$RECORDS" -p fieldcount=1 -p fieldlength=1000 \
    --server "127.0.0.1:$P0" -p kvs.fabric="$F" -p kvs.device=sim0 -threads 2 --depth 16 >/dev/null 2>&1
}
stop_cluster() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; PIDS=(); }
# mpib-bench on the rails sim2,sim3 with the migration's batch and window.
mpib_raw() { "$M" --spawn --devices sim2,sim3 --sizes 1M --window 4 --duration 2 "$@" |
  awk '/^1048576 B:/ {printf "%.1f\n", $3 * 1000}'; }

rates() { # tag -> runs migrations back and forth, beside mpib
  local tag=$1; shift
  for i in $(seq "$RUNS"); do
    migrate 0-511 1 >>"$T/$tag.mig"
    migrate 0-511 0 >>"$T/$tag.mig"
    mpib_raw "$@" >>"$T/$tag.mpib"
  done
}

if [ -z "${YCSB_ONLY:-}" ]; then
echo "== migration of 512 of 1024 slots, $RECORDS records of 1000 bytes, 2 workers per member; median of $((2 * RUNS)) migrations"
cluster "bench-mig-$$"
rates plain
stop_cluster
fi
MLX5_SIM_LINKS="sim2=$LINK,sim3=$LINK" cluster "bench-mig-link-$$"
if [ -z "${YCSB_ONLY:-}" ]; then
rates link --link-gbps "$LINK,$LINK"

row() { printf '%-44s %8s MB/s   mpib %8s MB/s   ratio %s\n' "$1" "$2" "$3" \
  "$(awk -v a="$2" -v b="$3" 'BEGIN {printf "%.2f", a / b}')"; }
row "memory-speed rails" "$(awk '{print $1}' "$T/plain.mig" | median)" "$(median <"$T/plain.mpib")"
row "link model, $LINK Gbit/s per rail" "$(awk '{print $1}' "$T/link.mig" | median)" "$(median <"$T/link.mpib")"
echo "   (one migration moves $(awk '{print $3}' "$T/plain.mig" | median) MB in $(awk '{print $2}' "$T/plain.mig" | median) s)"
fi

echo
echo "== YCSB workload A (2 threads, depth 16) before, during and after a migration of half the slots (link model on)"
"$D" run -P workloada -p recordcount="$RECORDS" -p fieldcount=1 -p fieldlength=1000 -p operationcount=1000000000 \
  -p maxexecutiontime="$YCSB_SECS" --server "127.0.0.1:$P0" -p kvs.fabric="$F" -p kvs.device=sim0 \
  -threads 2 --depth 16 -s -p status.interval=1 >"$T/ycsb.out" 2>"$T/ycsb.err" &
YP=$!
sleep $((YCSB_SECS / 3))
t0=$(date +%s%3N)
migrate 0-511 1 >/dev/null
t1=$(date +%s%3N)
wait "$YP"
# Status lines: "YYYY-MM-DD HH:MM:SS:mmm N sec: ops; X current ops/sec; ... [READ: ... 99=P ...]"
python3 - "$T/ycsb.err" "$t0" "$t1" <<'EOF'
import re, sys, datetime, statistics
path, t0, t1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = []
for l in open(path):
    m = re.match(r"(\d+-\d+-\d+ \d+:\d+:\d+):(\d+) .*?; ([\d.]+) current ops/sec;.*?\[READ: [^]]*?99=(\d+)", l)
    if not m:
        continue
    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() * 1000 + int(m.group(2))
    rows.append((t, float(m.group(3)), int(m.group(4))))
# An interval ends at t and began a second earlier: during = overlaps [t0, t1].
phases = {"before": [], "during": [], "after": []}
for i, (t, ops, p99) in enumerate(rows[1:-1], 1):
    start = rows[i - 1][0]
    key = "before" if t < t0 else ("after" if start > t1 else "during")
    phases[key].append((ops, p99))
base = None
for k in ("before", "during", "after"):
    v = phases[k]
    if not v:
        print(f"{k:>8}: no interval"); continue
    ops = statistics.median(o for o, _ in v); p99 = statistics.median(p for _, p in v)
    if base is None: base = (ops, p99)
    print(f"{k:>8}: {ops:10.0f} ops/s   READ p99 {p99:6.0f} us   ({len(v)} s; {ops / base[0]:.2f}x throughput, {p99 / base[1]:.2f}x p99 of before)")
print(f"   (the migration took {(t1 - t0) / 1000:.1f} s)")
EOF
echo
echo "Rocksteady (SOSP 2017, RAMCloud on 40 Gb/s DPDK NICs, published): 758 MB/s between servers under load;"
echo "median and 99.9th percentile latency below 40 and 250 us during migration (6 and 45 us without)."
