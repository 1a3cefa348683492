#!/usr/bin/env bash
# Software mlx5 device benchmark next to ucx_perftest over shared memory
# (UCX_TLS=posix,self), on the same machine in the same run.
#   bash scripts/bench-sim-vs-ucx.sh          # needs: apt-get install ucx-utils
set -euo pipefail
cd "$(dirname "$0")/.."
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing: apt-get install ucx-utils"; exit 1; }

ucx() { # test size iterations
  local port=$((13000 + RANDOM % 2000))
  UCX_TLS=posix,self ucx_perftest -p "$port" -t "$1" -s "$2" -n "$3" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  UCX_TLS=posix,self ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s "$2" -n "$3" 2>/dev/null | awk '/^Final/ {print}'
  wait "$srv" || true
}

echo "== software mlx5 device (cargo bench -p mlx5 --bench sim)"
cargo bench -q -p mlx5 --bench sim 2>/dev/null | grep -E '^(rate|lat|loop|software)'
echo
echo "== ucx_perftest $(ucx_info -v | awk '/Version/ {print $3}'), UCX_TLS=posix,self, two processes"
echo "   columns: iterations, latency p50/avg/overall (usec), bandwidth avg/overall (MB/s), rate avg/overall (msg/s)"
for s in 32 4096; do
  printf 'ucp_am_bw  %5s B  ' "$s"; ucx ucp_am_bw "$s" 1000000
  printf 'ucp_put_bw %5s B  ' "$s"; ucx ucp_put_bw "$s" 1000000
  printf 'ucp_am_lat %5s B  ' "$s"; ucx ucp_am_lat "$s" 100000
done
