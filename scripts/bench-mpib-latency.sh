#!/usr/bin/env bash
# mpib's small-message latency on the software device, with eager transfers
# over tag matching and without (every transfer after its CTS), beside
# ucx_perftest's tag_lat over shared memory (UCX_TLS=posix,self), same
# machine, same run. Half round trips (ping-pong), medians of RUNS runs.
#   bash scripts/bench-mpib-latency.sh      (needs: apt-get install ucx-utils)
# Knobs: RUNS (3), SIZES (8 64 1024 4096 16384), DUR (seconds per size, 1),
# RAILS (1), LATE=1 (the answer's receive posted after the send: its CTS
# is not there ahead of it).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
SIZES=${SIZES:-"8 64 1024 4096 16384"}
DUR=${DUR:-1}
RAILS=${RAILS:-1}
LATE=${LATE:-}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing: apt-get install ucx-utils"; exit 1; }
cargo build -q --release -p mpib --bin mpib-bench
B=target/release/mpib-bench
# As scripts/bench-mpib.sh: glibc's `rep movsb` path is ~30x slower than its
# vector loop on these VMs, for every program measured here alike.
if [ -z "${MPIB_BENCH_KEEP_REP_MOVSB:-}" ]; then
  export GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=4294967295
fi

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# eager_max -> lines "size p50" (half round trip, us)
mpib() {
  local list
  list=$(echo "$SIZES" | tr ' ' ',')
  "$B" --spawn --latency ${LATE:+--late-recv} --rails "$RAILS" --sizes "$list" --duration "$DUR" --eager-max "$1" 2>/dev/null |
    sed -nE 's/^([0-9]+) B: ([0-9.]+) us p50.*/\1 \2/p'
}

ucx() { # size -> typical latency (us, one way)
  local port=$((13000 + RANDOM % 2000))
  UCX_TLS=posix,self ucx_perftest -p "$port" -t tag_lat -s "$1" -n 100000 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  UCX_TLS=posix,self ucx_perftest 127.0.0.1 -p "$port" -t tag_lat -s "$1" -n 100000 2>/dev/null |
    awk '/^Final/ {print $3}'
  wait "$srv" || true
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$RUNS"); do
  mpib 8192 >> "$tmp/eager"
  mpib 0 >> "$tmp/cts"
  for s in $SIZES; do echo "$s $(ucx "$s")" >> "$tmp/ucx"; done
done
printf '%8s  %12s  %12s  %14s  %10s\n' size "mpib eager" "mpib CTS" "ucx tag_lat" "eager/CTS"
for s in $SIZES; do
  e=$(awk -v s="$s" '$1==s {print $2}' "$tmp/eager" | median)
  c=$(awk -v s="$s" '$1==s {print $2}' "$tmp/cts" | median)
  u=$(awk -v s="$s" '$1==s {print $2}' "$tmp/ucx" | median)
  printf '%8s  %9s us  %9s us  %11s us  %10s\n' "$s" "$e" "$c" "$u" "$(awk -v a="$e" -v b="$c" 'BEGIN {printf "%.2f", a/b}')"
done
