#!/usr/bin/env bash
# copyrpc on the software device next to ucx_perftest over shared memory
# (UCX_TLS=posix,self), same machine, same run. Each figure is the median of
# RUNS runs.   bash scripts/bench-copyrpc-vs-ucx.sh   (needs: apt-get install ucx-utils)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
DUR=${DUR:-3}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing: apt-get install ucx-utils"; exit 1; }
cargo build -q --release -p copyrpc --bin copyrpc-bench
B=target/release/copyrpc-bench

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

ucx() { # test size iterations -> the Final line
  local port=$((13000 + RANDOM % 2000))
  UCX_TLS=posix,self ucx_perftest -p "$port" -t "$1" -s "$2" -n "$3" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  UCX_TLS=posix,self ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s "$2" -n "$3" 2>/dev/null | awk '/^Final/'
  wait "$srv" || true
}

rpc() { # args... -> "Mrps p50 p99"
  "$B" client --spawn --payload 32 --duration "$DUR" "$@" 2>/dev/null |
    sed -E 's/.*: ([0-9.]+) Mrps; round trip p50 ([0-9.]+) us, p99 ([0-9.]+) us.*/\1 \2 \3/'
}

echo "== 32 B, one client thread and one server thread, two processes; median of $RUNS"
for i in $(seq "$RUNS"); do ucx ucp_am_bw 32 2000000 | awk '{print $9}'; done | median | awk '{printf "ucp_am_bw            %.3f M msg/s (one way)\n", $1 / 1e6}'
for i in $(seq "$RUNS"); do ucx ucp_am_lat 32 200000 | awk '{print $3}'; done | median | xargs printf 'ucp_am_lat           p50 %s us (one way; x2 for a round trip)\n'
for d in 64 256; do
  for i in $(seq "$RUNS"); do rpc --depth "$d" | awk '{print $1}'; done | median | xargs printf "copyrpc depth %-4s   %s Mrps\n" "$d"
done
for i in $(seq "$RUNS"); do rpc --depth 1; done > /tmp/copyrpc-lat.$$
printf 'copyrpc depth 1      round trip p50 %s us, p99 %s us\n' "$(awk '{print $2}' /tmp/copyrpc-lat.$$ | median)" "$(awk '{print $3}' /tmp/copyrpc-lat.$$ | median)"
rm -f /tmp/copyrpc-lat.$$
for e in 1 64 1024; do
  for i in $(seq "$RUNS"); do rpc --depth 64 --endpoints "$e" --busy 1 | awk '{print $1}'; done | median | xargs printf "copyrpc %4s endpoints, 1 busy, depth 64: %s Mrps\n" "$e"
done
