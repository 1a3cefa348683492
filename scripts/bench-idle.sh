#!/usr/bin/env bash
# Sleeping when idle against spinning, on the software device, same machine,
# same run (the default IdlePolicy::SpinThenSleep of copyrpc against
# IdlePolicy::Spin; kvs-server's default against --busy-poll):
#   - copyrpc-bench rates at depth 64 and depth 1;
#   - the round trip after an idle gap (the client pauses 1 ms after each
#     answer, so the server has fallen asleep), next to the spinning one;
#   - YCSB workload A through ycsb-driver against a kvs-server process (one
#     worker, one driver thread: one busy thread per core of a 2-core host);
#   - the CPU an idle 2-worker kvs-server uses (its threads' schedstat).
# Each figure is the median of RUNS runs; the two policies alternate so that
# both see the same phases of a noisy machine.
#
#   bash scripts/bench-idle.sh
#   RUNS=5 DUR=3 bash scripts/bench-idle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
DUR=${DUR:-2}
OPS=${OPS:-400000}
cargo build -q --release -p copyrpc --bin copyrpc-bench -p kvs-server --bin kvs-server -p ycsb-driver --bin ycsb-driver
R=target/release
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "nan"}'; }
T=$(mktemp -d /tmp/bench-idle.XXXXXX)
SERVER=
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$T" /dev/shm/mlx5sim-bench-idle-$$*; }
trap cleanup EXIT

# copyrpc TAG ARGS... -> appends Mrps to $T/TAG.rate, p50 us to $T/TAG.p50
copyrpc() { local tag=$1; shift
  local line
  line=$(MLX5_SIM_FABRIC=bench-idle-$$-c "$R/copyrpc-bench" client --spawn --duration "$DUR" "$@" 2>/dev/null)
  echo "  $line" >&2
  sed -n 's/.*: \([0-9.]*\) Mrps.*/\1/p' <<<"$line" >>"$T/$tag.rate"
  sed -n 's/.*p50 \([0-9.]*\) us.*/\1/p' <<<"$line" >>"$T/$tag.p50"
}

# ycsb TAG SERVER_ARGS... -> appends ops/s to $T/TAG.ycsb
ycsb() { local tag=$1; shift
  local f=bench-idle-$$-y
  "$R/kvs-server" --listen 127.0.0.1:0 --workers 1 --device sim1 --fabric "$f" \
    --stats-interval 0 "$@" >"$T/server.out" 2>&1 &
  SERVER=$!
  local addr=
  for _ in $(seq 100); do
    addr=$(sed -n 's/^kvs-server: listening on //p' "$T/server.out")
    [ -n "$addr" ] && break
    sleep 0.1
  done
  local props=(-P workloada -p recordcount=10000 -threads 1 --depth 16 --server "$addr"
    -p kvs.fabric="$f" -p kvs.device=sim0)
  [ "$tag" = spin ] && props+=(-p kvs.busy_poll=true)
  "$R/ycsb-driver" load "${props[@]}" >/dev/null 2>&1
  local tput
  tput=$("$R/ycsb-driver" run "${props[@]}" -p operationcount="$OPS" 2>/dev/null |
    sed -n 's/^\[OVERALL\], Throughput(ops\/sec), //p')
  echo "  YCSB-A $tag: $tput ops/s" >&2
  echo "$tput" >>"$T/$tag.ycsb"
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=
  rm -rf "/dev/shm/mlx5sim-$f"
}

# The CPU of an idle 2-worker server over 2 s, after 1 s of idling.
idle_cpu() {
  local f=bench-idle-$$-i
  "$R/kvs-server" --listen 127.0.0.1:0 --workers 2 --device sim1 --fabric "$f" \
    --stats-interval 0 "$@" >/dev/null 2>&1 &
  SERVER=$!
  sleep 1
  cpu() { cat /proc/"$SERVER"/task/*/schedstat | awk '{s+=$1} END {print s}'; }
  local a b
  a=$(cpu); sleep 2; b=$(cpu)
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=
  rm -rf "/dev/shm/mlx5sim-$f"
  awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f\n", (b - a) / 2e9 * 100}'
}

for run in $(seq "$RUNS"); do
  echo "run $run of $RUNS" >&2
  for idle in sleep spin; do
    copyrpc "$idle.d64" --idle "$idle"
    copyrpc "$idle.d1" --idle "$idle" --depth 1
    copyrpc "$idle.think" --idle "$idle" --depth 1 --think-us 1000
    ycsb "$idle" $([ "$idle" = spin ] && echo --busy-poll)
  done
  idle_cpu >>"$T/idle.cpu"
  idle_cpu --busy-poll >>"$T/busy.cpu"
done

m() { median <"$T/$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0) ? a / b : 0}'; }
# The median of the per-run ratios (each run's two policies ran back to back,
# in the same phase of the machine).
pairs() { paste "$T/$1" "$T/$2" | awk '$2 > 0 {printf "%.4f\n", $1 / $2}' | median; }
echo
echo "medians of $RUNS runs (sleep = spin then sleep, the default; spin = busy polling)"
printf '%-46s %12s %12s %10s %10s\n' "" sleep spin sleep/spin "per run"
for k in d64 d1; do
  printf '%-46s %12s %12s %10s %10.2f\n' "copyrpc-bench depth ${k#d} (Mrps)" "$(m sleep.$k.rate)" "$(m spin.$k.rate)" \
    "$(ratio "$(m sleep.$k.rate)" "$(m spin.$k.rate)")" "$(pairs sleep.$k.rate spin.$k.rate)"
done
printf '%-46s %12s %12s %10s\n' "round trip p50, depth 1 (us)" "$(m sleep.d1.p50)" "$(m spin.d1.p50)" \
  "$(ratio "$(m sleep.d1.p50)" "$(m spin.d1.p50)")"
printf '%-46s %12s %12s %10s\n' "round trip p50 after 1 ms idle (us)" "$(m sleep.think.p50)" "$(m spin.think.p50)" \
  "$(ratio "$(m sleep.think.p50)" "$(m spin.think.p50)")"
printf '%-46s %12.0f %12.0f %10s %10.2f\n' "YCSB-A, 1 worker, 1 thread x depth 16 (ops/s)" "$(m sleep.ycsb)" "$(m spin.ycsb)" \
  "$(ratio "$(m sleep.ycsb)" "$(m spin.ycsb)")" "$(pairs sleep.ycsb spin.ycsb)"
printf '%-46s %12s %12s\n' "idle 2-worker kvs-server (% of a core)" "$(m idle.cpu)" "$(m busy.cpu)"
