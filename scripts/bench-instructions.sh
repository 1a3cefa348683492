#!/usr/bin/env bash
# Instructions per YCSB operation, the figure that does not move with a noisy
# machine: callgrind over the embedded run (driver thread and server worker in
# one process, workload C, depth 16), at two operation counts, so that start-up
# and the load phase cancel out. The driver and the server sleep instead of
# spinning when idle (kvs.spin_us=0): a spin burns instructions for as long as
# the other thread is scheduled away, which measures valgrind's scheduling,
# not the work. The software device's own share is printed apart: its engine,
# run inline by the doorbells, and its handling of a CQ's arming (on a
# ConnectX both are the NIC's work). Valgrind runs one thread at a time, so a
# thread that finds a device lock held spins until valgrind switches threads;
# that spinning is device time too.
#
#   bash scripts/bench-instructions.sh [BASE]     (BASE: a commit to compare)
#   WORKLOAD=a DEPTH=1 bash scripts/bench-instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
BASE=${1:-}
WORKLOAD=${WORKLOAD:-c}; DEPTH=${DEPTH:-16}
N1=${N1:-100000}; N2=${N2:-200000}
W=$(mktemp -d /tmp/bench-instr.XXXXXX)
cleanup() {
  [ -n "$BASE" ] && git worktree remove --force "$W/tree" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT
cargo build -q --release -p ycsb-driver
if [ -n "$BASE" ]; then
  git worktree add -q --detach "$W/tree" "$BASE"
  (cd "$W/tree" && CARGO_TARGET_DIR="$W/target" cargo build -q --release -p ycsb-driver)
fi
# count BIN N -> "total device" instructions of a run of N operations
count() {
  local out="$W/cg.$RANDOM"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$1" run -P "workload$WORKLOAD" \
    -p recordcount=10000 -p operationcount="$2" -p kvs.spin_us=0 --depth "$DEPTH" >/dev/null 2>&1
  callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$out" 2>/dev/null | awk '
    /PROGRAM TOTALS/ {gsub(",", "", $1); total = $1}
    /<mlx5::sim::sched::Nic as mlx5::doorbell::DeviceNotify>::[a-z_]+ \[/ {
      gsub(",", "", $1); name = $0; sub(/.*DeviceNotify>::/, "", name); sub(/ .*/, "", name)
      if ($1 > dev[name]) dev[name] = $1
    }
    END {for (n in dev) d += dev[n]; print total, d + 0}'
  rm -f "$out"
}
# per_op BIN -> "total/op device/op"
per_op() {
  local a b
  read -r -a a <<<"$(count "$1" "$N1")"
  read -r -a b <<<"$(count "$1" "$N2")"
  awk -v t1="${a[0]}" -v d1="${a[1]}" -v t2="${b[0]}" -v d2="${b[1]}" -v n="$((N2 - N1))" \
    'BEGIN {printf "%.0f %.0f\n", (t2 - t1) / n, (d2 - d1) / n}'
}
echo "== instructions per operation: YCSB workload $WORKLOAD, depth $DEPTH, embedded (callgrind)"
read -r new_t new_d <<<"$(per_op target/release/ycsb-driver)"
row() { printf '%-12s %7s total   %7s software device   %7s the rest\n' "$1" "$2" "$3" "$(($2 - $3))"; }
row "this tree" "$new_t" "$new_d"
if [ -n "$BASE" ]; then
  read -r old_t old_d <<<"$(per_op "$W/target/release/ycsb-driver")"
  row "$BASE" "$old_t" "$old_d"
  awk -v a="$new_t" -v b="$old_t" -v c="$new_d" -v d="$old_d" 'BEGIN {
    printf "ratio this tree / %s: total %.3f, without the software device %.3f\n", "'"$BASE"'", a / b, (a - c) / (b - d) }'
fi
