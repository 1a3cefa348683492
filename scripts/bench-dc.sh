#!/usr/bin/env bash
# copyrpc over RC and over DC on the software device, same machine, same run,
# alternated; medians of RUNS runs.
#   bash scripts/bench-dc.sh                  # both parts
#   PART=few bash scripts/bench-dc.sh         # a handful of endpoints, with ucx_perftest beside
#   PART=scale ENDPOINTS=16384 bash scripts/bench-dc.sh
# Part "few": what DC costs when there are few peers (rate at depth 512,
# polling every 64 calls; round trip at depth 1), with ucx_perftest over
# shared memory (UCX_TLS=posix,self) when it is installed (apt-get install
# ucx-utils). UCX's dc_mlx5 needs a ConnectX and is not run here.
# Part "scale": one server context with ENDPOINTS client endpoints, one of
# them busy, against one endpoint alone, for RC and for DC; and what an
# endpoint costs in memory on each side (resident growth while the endpoints
# are set up, from copyrpc-bench's memory lines).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
DUR=${DUR:-3}
PART=${PART:-all}
ENDPOINTS=${ENDPOINTS:-16384}
cargo build -q --release -p copyrpc --bin copyrpc-bench
B=target/release/copyrpc-bench
# 16,384 endpoints are 16,384 TCP connections on each side.
ulimit -n "$(ulimit -Hn)"

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

rpc() { # transport args... -> "Mrps p50 p99"; memory lines to $T.mem
  "$B" client --spawn --transport "$1" --payload 32 --duration "$DUR" "${@:2}" 2>>"$T.mem" |
    sed -E 's/.*: ([0-9.]+) Mrps; round trip p50 ([0-9.]+) us, p99 ([0-9.]+) us.*/\1 \2 \3/'
}

ucx() { # test size iterations -> the Final line
  local port=$((13000 + RANDOM % 2000))
  UCX_TLS=posix,self ucx_perftest -p "$port" -t "$1" -s "$2" -n "$3" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  UCX_TLS=posix,self ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s "$2" -n "$3" 2>/dev/null | awk '/^Final/'
  wait "$srv" || true
}

T=$(mktemp -d)/dc
trap 'rm -rf "$(dirname "$T")"' EXIT

if [ "$PART" = all ] || [ "$PART" = few ]; then
  echo "== a handful of endpoints: 32 B, one thread per side, two processes; median of $RUNS"
  for e in 1 8; do
    for i in $(seq "$RUNS"); do
      for t in rc dc; do
        rpc "$t" --endpoints "$e" --depth 512 --poll-every 64 | awk '{print $1}' >> "$T.$t.$e.rate"
        rpc "$t" --endpoints "$e" --depth 1 >> "$T.$t.$e.rtt"
      done
      if [ "$e" = 1 ] && command -v ucx_perftest >/dev/null; then
        ucx ucp_am_bw 32 2000000 | awk '{print $9 / 1e6}' >> "$T.ucx.bw"
        ucx ucp_am_lat 32 200000 | awk '{print $3}' >> "$T.ucx.lat"
      fi
    done
    for t in rc dc; do
      rate=$(median < "$T.$t.$e.rate")
      rtt=$(awk '{print $2}' "$T.$t.$e.rtt" | median)
      rtt99=$(awk '{print $3}' "$T.$t.$e.rtt" | median)
      printf '%s, %s endpoint(s): %s Mrps (depth 512, poll every 64), round trip p50 %s us, p99 %s us\n' \
        "$t" "$e" "$rate" "$rtt" "$rtt99"
      eval "${t}_rate=$rate ${t}_rtt=$rtt"
    done
    printf '   DC / RC: rate %s, round trip %s\n' "$(ratio "$dc_rate" "$rc_rate")" "$(ratio "$dc_rtt" "$rc_rtt")"
  done
  if [ -s "$T.ucx.bw" ]; then
    bw=$(median < "$T.ucx.bw"); lat=$(median < "$T.ucx.lat")
    printf 'ucp_am_bw %s M msg/s one way; ucp_am_lat p50 %s us one way (shared memory, same run)\n' "$bw" "$lat"
  else
    echo "ucx_perftest not installed: no UCX figures (apt-get install ucx-utils)"
  fi
fi

if [ "$PART" = all ] || [ "$PART" = scale ]; then
  echo "== one server context, $ENDPOINTS client endpoints, 1 busy; 16 KiB rings, depth 64, poll every 16; median of $RUNS"
  for t in rc dc; do
    : > "$T.mem"
    for i in $(seq "$RUNS"); do
      rpc "$t" --ring 16384 --endpoints 1 --depth 64 --poll-every 16 | awk '{print $1}' >> "$T.$t.one"
      rpc "$t" --ring 16384 --endpoints "$ENDPOINTS" --busy 1 --depth 64 --poll-every 16 | awk '{print $1}' >> "$T.$t.many"
    done
    one=$(median < "$T.$t.one"); many=$(median < "$T.$t.many")
    printf '%s: 1 endpoint %s Mrps; %s endpoints, 1 busy, %s Mrps (%s of one endpoint)\n' \
      "$t" "$one" "$ENDPOINTS" "$many" "$(ratio "$many" "$one")"
    for side in client server; do
      grep "$side memory" "$T.mem" | grep "over $ENDPOINTS endpoints" |
        sed -E 's/.*per endpoint ([0-9.]+) KiB.*/\1/' | median |
        xargs printf '   %s: %s KiB resident per endpoint (the context itself apart), plus 2 rings of 16 KiB\n' "$side"
    done
  done
fi
