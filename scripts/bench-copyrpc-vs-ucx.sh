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
# The software device's own ping-pong (a WRITE_IMM each way, no RPC layer): the
# floor under copyrpc's round trip on this device.
SIM=$(cargo bench -q -p mlx5 --bench sim --no-run --message-format=json 2>/dev/null |
  grep '"name":"sim"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)

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
# UCX and copyrpc alternate, so that both see the same phases of a shared,
# noisy machine; the ratios are of the medians.
T=/tmp/copyrpc-vs-ucx.$$
for i in $(seq "$RUNS"); do
  ucx ucp_am_bw 32 2000000 | awk '{print $9 / 1e6}' >> $T.bw
  rpc --depth 512 --poll-every 64 | awk '{print $1}' >> $T.rate
  ucx ucp_am_lat 32 200000 | awk '{print $3}' >> $T.lat
  rpc --depth 1 >> $T.rtt
  "$SIM" --lat-only | awk '{print $5}' >> $T.dev
done
bw=$(median < $T.bw); rate=$(median < $T.rate); lat=$(median < $T.lat)
rtt=$(awk '{print $2}' $T.rtt | median); rtt99=$(awk '{print $3}' $T.rtt | median)
dev=$(median < $T.dev)
printf 'ucp_am_bw            %.3f M msg/s (one way)\n' "$bw"
printf 'ucp_am_lat           p50 %s us (one way; x2 for a round trip)\n' "$lat"
printf 'copyrpc depth 512, poll every 64 calls: %s Mrps (%.2fx ucp_am_bw)\n' "$rate" "$(awk -v a="$rate" -v b="$bw" 'BEGIN { print a / b }')"
printf 'copyrpc depth 1      round trip p50 %s us, p99 %s us (%.2fx ucp_am_lat round trip)\n' "$rtt" "$rtt99" "$(awk -v a="$rtt" -v b="$lat" 'BEGIN { print a / (2 * b) }')"
printf 'device ping-pong     p50 %s us one way, no RPC layer (round trip %.2fx ucp_am_lat; copyrpc %.2fx of it)\n' "$dev" "$(awk -v a="$dev" -v b="$lat" 'BEGIN { print a / b }')" "$(awk -v a="$rtt" -v b="$dev" 'BEGIN { print a / (2 * b) }')"
rm -f $T.*
for d in 64 256; do
  for i in $(seq "$RUNS"); do rpc --depth "$d" | awk '{print $1}'; done | median | xargs printf "copyrpc depth %-4s   %s Mrps (poll when the window is full)\n" "$d"
done
for e in 1 64 1024; do
  for i in $(seq "$RUNS"); do rpc --depth 512 --poll-every 64 --endpoints "$e" --busy 1 | awk '{print $1}'; done | median | xargs printf "copyrpc %4s endpoints, 1 busy, depth 512, poll every 64: %s Mrps\n" "$e"
done
