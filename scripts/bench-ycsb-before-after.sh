#!/usr/bin/env bash
# A change's cost to the KV store's hot path: a YCSB workload (WORKLOAD, A by
# default; the embedded demo: one server worker, one driver thread, depth 1
# and 16) with the
# ycsb-driver built from BASE and from the working tree, alternated in the
# same run (the order flips every round, as the second run of a pair is
# slower on this machine), medians of ROUNDS.
#
#   bash scripts/bench-ycsb-before-after.sh BASE [ROUNDS]
#   bash scripts/bench-ycsb-before-after.sh b41c0bc 10    # before the cluster
#   WORKLOAD=c bash scripts/bench-ycsb-before-after.sh aae89da
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?BASE commit}; R=${2:-8}
RECORDS=${RECORDS:-100000}; OPS=${OPS:-1000000}; WORKLOAD=${WORKLOAD:-a}
W=$(mktemp -d /tmp/bench-base.XXXXXX)
cleanup() { git worktree remove --force "$W/tree" >/dev/null 2>&1 || true; rm -rf "$W"; }
trap cleanup EXIT
git worktree add -q --detach "$W/tree" "$BASE"
(cd "$W/tree" && CARGO_TARGET_DIR="$W/target" cargo build -q --release -p ycsb-driver)
cargo build -q --release -p ycsb-driver
OLD="$W/target/release/ycsb-driver"; NEW=target/release/ycsb-driver
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
run() { "$1" run -P "workload$WORKLOAD" -p recordcount="$RECORDS" -p operationcount="$OPS" --depth "$2" 2>/dev/null |
  awk '/Throughput/ {print $3}'; }
for i in $(seq "$R"); do
  for d in 1 16; do
    order="OLD NEW"; [ $((i % 2)) -eq 0 ] && order="NEW OLD"
    for v in $order; do
      run "${!v}" "$d" >> "$W/$v.$d"
    done
  done
done
for d in 1 16; do
  o=$(median < "$W/OLD.$d"); n=$(median < "$W/NEW.$d")
  printf 'workload %s, depth %2s: %s %10.0f ops/s   this tree %10.0f ops/s   ratio %.3f\n' \
    "$WORKLOAD" "$d" "$BASE" "$o" "$n" "$(awk -v a="$n" -v b="$o" 'BEGIN {print a / b}')"
done
