#!/usr/bin/env bash
# What durability costs, on the software device, beside Redis and the disk,
# all measured in one run:
#  1. YCSB workload A against three kvs-server members (WORKERS workers
#     each, replicas = 2) with durability none, everysec and always: a fresh
#     cluster per setting (durability is a start option), RECORDS loaded,
#     OPS operations from THREADS driver threads at depth DEPTH; then at
#     depth 1 for none and always (SECS1 seconds each), to show what a
#     turn's group commit buys.
#  2. The same driver against Redis (redis-server on loopback, a temp dir,
#     no RDB saves, AOF rewrites off): appendonly no, and appendonly yes
#     with appendfsync everysec and always, the same depths.
#  3. The disk under the temp dir: a 4 KiB write with O_DSYNC (dd, DSYNC_WRITES
#     writes) and its sequential write rate (dd, SEQ_MB MiB and an fdatasync).
#  The settings alternate: every repetition (RUNS) runs each setting once,
#  ours then Redis's, each repetition starting one setting further along;
#  the figures are medians, and a ratio is the median of the ratios within
#  each repetition. While our cluster runs, its log writes are counted and
#  its worker threads sampled (running, sleeping, waiting for the disk).
#  4. Recovery: one member (REPLAY_WORKERS workers, durability
#     REPLAY_DURABILITY) takes REPLAY_RECORDS records (about 1 KiB each), is
#     killed (kill -9) and started again, REPLAY_RUNS times; each time its
#     recovery (each worker's line "N changes from snapshot G and M from the
#     logs (B bytes) recovered from DIR in S s": bytes summed, the slowest
#     worker's seconds, as the workers recover at once) and the CPU time its
#     start took, beside dd's sequential read of the same files, both with
#     the files out of the page cache when that can be done (said in the
#     output), and a second recovery with the files cached. Medians.
#  5. Throughput during snapshots: YCSB-A for SNAP_SECS seconds without a
#     snapshot, while every member snapshots again and again, and without
#     again (durability everysec).
#
#   bash scripts/bench-durability.sh
#   RUNS=5 RECORDS=100000 OPS=600000 DEPTH=64 bash scripts/bench-durability.sh
#   RUNS=1 RECORDS=2000 OPS=20000 SECS1=1 REPLAY_RECORDS=20000 bash scripts/bench-durability.sh
#   PARTS=recovery REPLAY_RUNS=5 bash scripts/bench-durability.sh
#   RUNS=5 SETTINGS="none always" PARTS=settings BEFORE=/tmp/old-bin bash scripts/bench-durability.sh
# SERVER_ARGS: more kvs-server flags for the clusters' members (parts 1
# and 5), e.g. SERVER_ARGS="--snapshot-rate 0".
# Also: THREADS, WORKERS, SECS1, SNAP_SECS, DSYNC_WRITES, SEQ_MB, REPLAY_RECORDS,
# REPLAY_WORKERS (default WORKERS), REPLAY_RUNS (default RUNS),
# REPLAY_DURABILITY (everysec or always), SKIP_REDIS=1; TMPDIR picks the
# disk (the data dirs, Redis's dir and dd's file all live under it).
# SETTINGS: the durability settings of 1-3 (none everysec always; Redis
# runs the same ones: no, everysec, always). PARTS: which of 1-3
# (settings), 4 (recovery) and 5 (snapshots) run. BEFORE: a directory
# holding another build's kvs-server (an earlier commit's, say): each
# setting of 1 also runs on it, in the same repetitions ("before
# always"), for a before/after comparison on one noisy machine. BIN: a
# directory holding ycsb-driver, kvs-server and kvs-admin to run instead
# of building them.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
RECORDS=${RECORDS:-50000}
OPS=${OPS:-300000}
DEPTH=${DEPTH:-64}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-2}
SECS1=${SECS1:-5}
SNAP_SECS=${SNAP_SECS:-10}
DSYNC_WRITES=${DSYNC_WRITES:-1000}
SEQ_MB=${SEQ_MB:-512}
REPLAY_RECORDS=${REPLAY_RECORDS:-300000}
REPLAY_WORKERS=${REPLAY_WORKERS:-$WORKERS}
REPLAY_RUNS=${REPLAY_RUNS:-$RUNS}
REPLAY_DURABILITY=${REPLAY_DURABILITY:-everysec}
SKIP_REDIS=${SKIP_REDIS:-0}
SETTINGS=${SETTINGS:-none everysec always}
PARTS=${PARTS:-settings recovery snapshots}
BEFORE=${BEFORE:-}
part() { [[ " $PARTS " == *" $1 "* ]]; }
setting() { [[ " $SETTINGS " == *" $1 "* ]]; }

# The interpreter itself, not a shim that starts it (the sampler below
# must start within a short run).
py=$(python3 -c 'import sys; print(sys.executable)')
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build -q --release -p ycsb-driver -p kvs-server -p kvs-admin
  bin=$(cargo metadata -q --format-version 1 --no-deps |
    "$py" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release
fi
D=$bin/ycsb-driver
S=$bin/kvs-server
A=$bin/kvs-admin
if [ -n "$BEFORE" ] && [ ! -x "$BEFORE/kvs-server" ]; then
  echo "bench-durability: no kvs-server in BEFORE=$BEFORE" >&2
  exit 1
fi

redis=1
if [ "$SKIP_REDIS" = 1 ]; then
  redis=0
elif ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  echo "(redis-server not installed: apt-get install -y redis-server; Redis is left out)" >&2
  redis=0
fi

root=$(mktemp -d "${TMPDIR:-/tmp}/bench-durability.XXXXXX")
fabric_base="bench-durability-$$"
pids=()     # every process this script started and has not ended
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$root" /dev/shm/mlx5sim-"$fabric_base"-*
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$root/res"

die() { echo "bench-durability: $*" >&2; exit 1; }
# die, with the end of a process's log
die_log() { # log message
  echo "bench-durability: $2; the end of $1:" >&2
  tail -n 20 "$1" >&2 || true
  exit 1
}
forget() { # pid: no longer ours to clean up
  local p keep=()
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  pids=("${keep[@]}")
}
stop() { # pid...: kill -9 and reap
  local p
  for p in "$@"; do
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
    forget "$p"
  done
}

# Three consecutive free TCP ports on loopback; prints the first.
free_ports() {
  "$py" - <<'EOF'
import random, socket
for _ in range(200):
    base = random.randrange(20000, 40000)
    socks = []
    try:
        for p in range(base, base + 3):
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            socks.append(s)
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    break
else:
    raise SystemExit("no three free ports")
EOF
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "nan"}'; }
# A driver report -> "throughput read-p50 read-p99 update-p50 update-p99 failed"
pick() { awk '
  $1=="[OVERALL]," && $2=="Throughput(ops/sec)," {t=$3}
  $1=="[READ]," && $2=="50thPercentileLatency(us),"  {r50=$3}
  $1=="[READ]," && $2=="99thPercentileLatency(us),"  {r99=$3}
  $1=="[UPDATE]," && $2=="50thPercentileLatency(us),"  {u50=$3}
  $1=="[UPDATE]," && $2=="99thPercentileLatency(us),"  {u99=$3}
  $2 ~ /^Return=/ && $2 != "Return=OK," {bad+=$3}
  END {print t, r50, r99, u50, u99, bad+0}'; }

# --- starting and stopping kvs-server members -------------------------------

# Waits until the server whose stdout+stderr go to LOG says it listens.
wait_up() { # log pid what timeout-seconds
  local i
  for ((i = 0; i < $4 * 10; i++)); do
    grep -qs '^kvs-server: listening on' "$1" && return 0
    kill -0 "$2" 2>/dev/null || die_log "$1" "$3 exited before it came up"
    sleep 0.1
  done
  die_log "$1" "$3 did not come up within $4 s"
}

n=0          # clusters started, for their fabric's and dir's names
members=()   # the running cluster's pids
fabric=""
base=0
# A three-member cluster with durability $1 ("before-" first: on the
# BEFORE build), replicas = 2, slots spread.
cluster_up() {
  local m how dir log server=$S dur=$1
  if [ "${1#before-}" != "$1" ]; then
    server=$BEFORE/kvs-server
    dur=${1#before-}
  fi
  n=$((n + 1))
  fabric="$fabric_base-$n"
  base=$(free_ports)
  members=()
  for m in 0 1 2; do
    # Member 0 starts the cluster; the others join it.
    how=(--bootstrap)
    [ "$m" -gt 0 ] && how=(--join "127.0.0.1:$base")
    dir="$root/c$n/m$m"
    log="$root/c$n-m$m.log"
    mkdir -p "$dir"
    "$server" --listen "127.0.0.1:$((base + m))" --fabric "$fabric" --device sim1 --workers "$WORKERS" \
      --stats-interval 0 --data-dir "$dir" --durability "$dur" "${how[@]}" ${SERVER_ARGS:-} >"$log" 2>&1 &
    pids+=($!)
    members+=($!)
    wait_up "$log" $! "member $m (durability $1)" 30
  done
  admin=("$A" --server "127.0.0.1:$base" --fabric "$fabric" --device sim0)
  "${admin[@]}" rebalance >"$root/admin.log" 2>&1 || die_log "$root/admin.log" "kvs-admin rebalance failed"
  "${admin[@]}" set replicas 2 --max-wait 120 >"$root/admin.log" 2>&1 ||
    die_log "$root/admin.log" "kvs-admin set replicas 2 failed"
}
cluster_down() {
  stop "${members[@]}"
  members=()
  rm -rf "$root/c$n" /dev/shm/mlx5sim-"$fabric"*
}

# --- Redis ----------------------------------------------------------------

rpid=0
rport=0
# A Redis server with persistence $1: no, everysec or always.
redis_up() {
  local dir="$root/redis" i
  rm -rf "$dir"
  mkdir -p "$dir"
  rport=$(free_ports)
  local aof=(--appendonly no)
  [ "$1" != no ] && aof=(--appendonly yes --appendfsync "$1")
  redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir" --save "" \
    --auto-aof-rewrite-percentage 0 "${aof[@]}" >"$root/redis.log" 2>&1 &
  rpid=$!
  pids+=("$rpid")
  for ((i = 0; i < 100; i++)); do
    [ "$(redis-cli -p "$rport" ping 2>/dev/null)" = PONG ] && return 0
    kill -0 "$rpid" 2>/dev/null || die_log "$root/redis.log" "redis-server exited before it came up"
    sleep 0.1
  done
  die_log "$root/redis.log" "redis-server did not answer within 10 s"
}
redis_down() {
  stop "$rpid"
  rm -rf "$root/redis"
}

# --- the driver -------------------------------------------------------------

wl=(-P workloada -p recordcount="$RECORDS" -threads "$THREADS")
# Runs the driver (its arguments), and appends the report's figures to
# $root/res/NAME.
drive() { # name driver-args...
  local name=$1 out="$root/drive.out" err="$root/drive.err"
  shift
  [ "${#members[@]}" -eq 0 ] || watch_start
  "$D" "$@" >"$out" 2>"$err" || die_log "$err" "ycsb-driver $* failed"
  local f
  f=$(pick <"$out")
  [ -n "${f%% *}" ] || die_log "$out" "no throughput in ycsb-driver's report ($name)"
  [ "${f##* }" = 0 ] || echo "  warning: $name: ${f##* } operations failed" >&2
  echo "$f" >>"$root/res/$name"
  printf '  %-22s %9.0f ops/s  READ p99 %6s us  UPDATE p99 %6s us\n' "$name" \
    "$(cut -d' ' -f1 <<<"$f")" "$(cut -d' ' -f3 <<<"$f")" "$(cut -d' ' -f5 <<<"$f")"
  [ "${#members[@]}" -eq 0 ] || watch_end "$name"
}
# While the driver runs against the cluster: its members' write(2) calls
# (/proc/PID/io; the members write nothing else while serving, so these
# are log writes, one per worker turn with changes: under `always` one
# fdatasync each), and where their workers' threads are, sampled every
# 10 ms: running (R, spinning when idle included), sleeping (S), or in the
# kernel waiting for the disk (D), with the kernel function D waits in most.
cat >"$root/sample.py" <<'EOF'
import collections, os, sys, time
out, stop, pids = sys.argv[1], sys.argv[2], sys.argv[3:]
tasks = []
for p in pids:
    for t in os.listdir(f"/proc/{p}/task"):
        d = f"/proc/{p}/task/{t}/"
        with open(d + "comm") as f:
            if f.read().startswith("kvs-worker"):
                tasks.append(d)
states, waits = collections.Counter(), collections.Counter()
while not os.path.exists(stop):
    for d in tasks:
        try:
            with open(d + "stat") as f:
                st = f.read()
            s = st[st.rindex(")") + 2]
            states[s] += 1
            if s == "D":
                with open(d + "wchan") as f:
                    waits[f.read().strip() or "?"] += 1
        except OSError:
            pass
    time.sleep(0.01)
n = sum(states.values())
top = waits.most_common(1)[0][0] if waits else "-"
with open(out, "w") as f:
    if n:
        print(*(f"{100 * states[s] / n:.0f}" for s in "RSD"), top, file=f)
    else:
        print("- - - -", file=f)
EOF
syscw() { # members' write(2) calls so far
  local p t=0 w
  for p in "${members[@]}"; do
    w=$(awk '$1 == "syscw:" {print $2}' "/proc/$p/io")
    t=$((t + w))
  done
  echo "$t"
}
spid=0
watch_start() {
  syscw >"$root/syscw0"
  rm -f "$root/sample.out" "$root/sample.stop"
  "$py" "$root/sample.py" "$root/sample.out" "$root/sample.stop" "${members[@]}" &
  spid=$!
  pids+=("$spid")
}
# -> $root/res/NAME.w: "log-writes/s-per-worker changes-per-write R% S% D% wait"
watch_end() { # name
  touch "$root/sample.stop"
  wait "$spid" 2>/dev/null || true
  forget "$spid"
  local w ms upd f a b c d e g
  w=$(($(syscw) - $(cat "$root/syscw0")))
  ms=$(awk '$1=="[OVERALL]," && $2=="RunTime(ms)," {print $3}' "$root/drive.out")
  upd=$(awk '$1=="[UPDATE]," && $2=="Operations," {print $3}' "$root/drive.out")
  # Every update is a change at its primary and at its backup.
  f=$(awk -v w="$w" -v ms="$ms" -v u="${upd:-0}" -v k=$((3 * WORKERS)) \
    'BEGIN {printf "%.0f %s", w / (ms / 1000) / k, (w > 0 ? sprintf("%.1f", 2 * u / w) : "-")}')
  f="$f $(cat "$root/sample.out" 2>/dev/null || echo "- - - -")"
  echo "$f" >>"$root/res/$1.w"
  read -r a b c d e g <<<"$f"
  printf '  %-22s log writes %s/s a worker, %s changes each; workers R %s%% S %s%% D %s%% (%s)\n' \
    "" "$a" "$b" "$c" "$d" "$e" "$g"
}

# The run phase at depth DEPTH (OPS operations), and at depth 1 for SECS1
# seconds when $3 says so.
runs() { # prefix with-depth-1 driver-target-args...
  local prefix=$1 one=$2
  shift 2
  drive "$prefix-d$DEPTH" run "$@" "${wl[@]}" -p operationcount="$OPS" --depth "$DEPTH"
  if [ "$one" = 1 ]; then
    drive "$prefix-d1" run "$@" "${wl[@]}" -p operationcount=1000000000 \
      -p maxexecutiontime="$SECS1" --depth 1
  fi
}

# --- the disk ---------------------------------------------------------------

# dd's seconds from its last line ("N bytes (...) copied, S s, R MB/s").
dd_secs() { awk '/copied/ {for (i = 1; i <= NF; i++) if ($i == "s,") s = $(i-1)} END {print s}'; }
disk() {
  local f="$root/dd.bin" s
  s=$(dd if=/dev/zero of="$f" bs=4k count="$DSYNC_WRITES" oflag=dsync 2>&1 | dd_secs)
  awk -v s="$s" -v n="$DSYNC_WRITES" 'BEGIN {printf "%.1f\n", s / n * 1e6}' >>"$root/res/dsync-us"
  rm -f "$f"
  s=$(dd if=/dev/zero of="$f" bs=1M count="$SEQ_MB" conv=fdatasync 2>&1 | dd_secs)
  awk -v s="$s" -v n="$SEQ_MB" 'BEGIN {printf "%.0f\n", n * 1048576 / s / 1e6}' >>"$root/res/seqwrite-mbs"
  rm -f "$f"
  printf '  disk: 4 KiB O_DSYNC write %s us, sequential write %s MB/s\n' \
    "$(tail -n1 "$root/res/dsync-us")" "$(tail -n1 "$root/res/seqwrite-mbs")"
}

# --- 1-3: the settings, alternated -------------------------------------------

# The settings in the order repetition $1 runs them: each repetition starts
# one further along, so that no setting always runs first.
rotate() { # repetition settings...
  local k=$((($1 - 1) % ($# - 1))) a=("${@:2}")
  echo "${a[@]:k}" "${a[@]:0:k}"
}

echo "== bench-durability: $RUNS repetitions; YCSB-A, $RECORDS records, $THREADS driver threads;"
echo "   3 members of $WORKERS workers, replicas = 2; temp dir on $(df -P "$root" | awk 'NR==2 {print $1}');" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
# The kvs settings (and the BEFORE build's), and Redis's.
kvs_settings=()
redis_settings=()
for s in none everysec always; do
  setting "$s" || continue
  kvs_settings+=("$s")
  [ -n "$BEFORE" ] && kvs_settings+=("before-$s")
  redis_settings+=("$([ "$s" = none ] && echo no || echo "$s")")
done
part settings || RUNS_1=0
for i in $(seq "${RUNS_1:-$RUNS}"); do
  echo "-- repetition $i of $RUNS"
  disk
  for s in $(rotate "$i" "${kvs_settings[@]}"); do
    cluster_up "$s"
    remote=(--server "127.0.0.1:$base" -p kvs.fabric="$fabric" -p kvs.device=sim0)
    "$D" load "${remote[@]}" "${wl[@]}" --depth 16 >"$root/load.out" 2>&1 ||
      die_log "$root/load.out" "loading the cluster (durability $s) failed"
    one=0
    [ "${s#before-}" != everysec ] && one=1
    runs "kvs-$s" "$one" "${remote[@]}"
    cluster_down
  done
  if [ "$redis" = 1 ]; then
    for s in $(rotate "$i" "${redis_settings[@]}"); do
      redis_up "$s"
      rr=(redis -p redis.port="$rport")
      "$D" load "${rr[@]}" "${wl[@]}" --depth 16 >"$root/load.out" 2>&1 ||
        die_log "$root/load.out" "loading Redis (appendfsync $s) failed"
      one=0
      [ "$s" != everysec ] && one=1
      runs "redis-$s" "$one" "${rr[@]}"
      redis_down
    done
  fi
done

# --- 4: recovery --------------------------------------------------------------

# Takes FILE's pages out of the page cache: written back, then dropped with
# posix_fadvise(DONTNEED), or, if some stay and we may, with
# /proc/sys/vm/drop_caches. Prints how, and the bytes still cached.
uncache() { # file
  sync "$1"
  "$py" -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
  local way="fadvise" left
  left=$(cached "$1")
  if [ "$left" != 0 ] && [ -w /proc/sys/vm/drop_caches ] && { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
    way="drop_caches"
    left=$(cached "$1")
  fi
  echo "$way $left"
}
# Bytes of FILE in the page cache ("?" without fincore).
cached() {
  if command -v fincore >/dev/null; then fincore -bn -o RES "$1" | awk '{print $1}'; else echo "?"; fi
}
# The recovery lines of a member's log (a worker's: "N changes from
# snapshot G and M from the logs (B bytes) recovered from DIR in S s") ->
# "changes bytes seconds": summed over the workers, the slowest one's
# seconds (they recover at once).
replayed() {
  sed -n 's/.* \([0-9]*\) changes from snapshot [0-9]* and \([0-9]*\) from the logs (\([0-9]*\) bytes) recovered from .* in \([0-9.]*\) s.*/\1 \2 \3 \4/p' "$1" |
    awk '{c += $1 + $2; b += $3; if ($4 > s) s = $4} END {if (NR) print c, b, s}'
}
# Waits (up to 10 s) until each worker's recovery line is in LOG: the
# member says it listens once they recovered, but its log lines may reach
# the file later.
wait_replayed() { # log
  local i
  for ((i = 0; i < 100; i++)); do
    [ "$(grep -c ' recovered from ' "$1")" -ge "$REPLAY_WORKERS" ] && return 0
    sleep 0.1
  done
}
# The workers' files: their snapshots (if any) and their logs.
worker_files() { ls "$rdir"/data/worker-*.snap "$rdir"/data/worker-*.*.log 2>/dev/null; }
# MB/s of BYTES in SECONDS.
mbs() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.0f\n", b / s / 1e6}'; }

if part recovery; then
  echo "-- recovery: one member, $REPLAY_WORKERS workers, durability $REPLAY_DURABILITY," \
    "$REPLAY_RECORDS records, $REPLAY_RUNS restarts"
  n=$((n + 1))
  fabric="$fabric_base-$n"
  rbase=$(free_ports)
  rdir="$root/replay"
  start_replay_member() { # log what timeout [--bootstrap]
    "$S" --listen "127.0.0.1:$rbase" --fabric "$fabric" --device sim1 --workers "$REPLAY_WORKERS" \
      --stats-interval 0 --data-dir "$rdir" --durability "$REPLAY_DURABILITY" "${@:4}" >"$1" 2>&1 &
    rm_pid=$!
    pids+=("$rm_pid")
    wait_up "$1" "$rm_pid" "$2" "$3"
  }
  start_replay_member "$root/replay-0.log" "the recovery member" 30 --bootstrap
  "$D" load --server "127.0.0.1:$rbase" -p kvs.fabric="$fabric" -p kvs.device=sim0 \
    -P workloada -p recordcount="$REPLAY_RECORDS" -threads 2 --depth 16 >"$root/load.out" 2>&1 ||
    die_log "$root/load.out" "loading the recovery member failed"
  stop "$rm_pid"
  rm -rf /dev/shm/mlx5sim-"$fabric"*
  uncache_all() { # -> "how bytes-left" over the workers' files
    local f how left total=0 hows=""
    for f in "${wal[@]}"; do
      read -r how left <<<"$(uncache "$f")"
      hows="$how"
      [ "$left" = "?" ] && total="?"
      [ "$total" != "?" ] && total=$((total + left))
    done
    echo "$hows $total"
  }
  for i in $(seq "$REPLAY_RUNS"); do
    # A start may leave a snapshot it began (cut short by the kill, and
    # removed at the next start) or finished: the files are looked at anew.
    mapfile -t wal < <(worker_files)
    [ "${#wal[@]}" -gt 0 ] || die "no snapshot or log in $rdir/data after the load"
    read -r cache_how cache_left <<<"$(uncache_all)"
    t0=$(date +%s.%N)
    start_replay_member "$root/replay-1.log" "the recovery member, restarted" 600
    t1=$(date +%s.%N)
    # CPU time the restarted member has used (its start, nearly all of it
    # the replay): a rate per CPU-second does not depend on the machine's
    # load.
    cpu_secs=$(awk -v hz="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); printf "%.2f", ($12 + $13) / hz}' "/proc/$rm_pid/stat")
    wait_replayed "$root/replay-1.log"
    read -r r_changes r_bytes r_secs <<<"$(replayed "$root/replay-1.log")"
    [ -n "${r_secs:-}" ] || die_log "$root/replay-1.log" "no recovery line in the restarted member's log"
    up_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
    # The same files again, now in the page cache (the replay just read them).
    stop "$rm_pid"
    rm -rf /dev/shm/mlx5sim-"$fabric"*
    start_replay_member "$root/replay-2.log" "the recovery member, restarted again" 600
    wait_replayed "$root/replay-2.log"
    read -r _ w_bytes w_secs <<<"$(replayed "$root/replay-2.log")"
    [ -n "${w_secs:-}" ] || die_log "$root/replay-2.log" "no recovery line in the restarted member's log"
    stop "$rm_pid"
    rm -rf /dev/shm/mlx5sim-"$fabric"*
    mapfile -t wal < <(worker_files)
    wal_bytes=$(stat -c %s "${wal[@]}" | awk '{s += $1} END {print s}')
    read -r dd_how dd_left <<<"$(uncache_all)"
    dd_s=0
    for f in "${wal[@]}"; do
      dd_s=$(awk -v a="$dd_s" -v b="$(dd if="$f" of=/dev/null bs=1M 2>&1 | dd_secs)" 'BEGIN {print a + b}')
    done
    replay_mbs=$(mbs "$r_bytes" "$r_secs")
    dd_mbs=$(mbs "$wal_bytes" "$dd_s")
    echo "$replay_mbs" >>"$root/res/replay-mbs"
    echo "$r_secs" >>"$root/res/replay-secs"
    echo "$up_secs" >>"$root/res/replay-up"
    echo "$cpu_secs" >>"$root/res/replay-cpu"
    mbs "$r_bytes" "$cpu_secs" >>"$root/res/replay-cpu-mbs"
    mbs "$w_bytes" "$w_secs" >>"$root/res/replay-warm-mbs"
    echo "$dd_mbs" >>"$root/res/replay-dd-mbs"
    awk -v a="$replay_mbs" -v b="$dd_mbs" 'BEGIN {printf "%.2f\n", a / b}' >>"$root/res/replay-ratio"
    printf '  restart %s: %s changes, %s MB in %s s: %s MB/s (%s CPU-s); cached %s s; dd %s MB/s\n' \
      "$i" "$r_changes" "$((r_bytes / 1000000))" "$r_secs" "$replay_mbs" "$cpu_secs" "$w_secs" "$dd_mbs"
  done
fi

# --- 5: throughput during a snapshot -----------------------------------------
# YCSB-A at depth DEPTH for SNAP_SECS seconds on a three-member cluster
# (durability everysec, replicas = 2): without a snapshot, then while every
# member snapshots its workers again and again (kvs-admin snapshot, one
# after the other until the run ends), then without again; the ratio is the
# run with snapshots over the mean of the two without.
if part snapshots; then
  echo "-- throughput during snapshots: $SNAP_SECS s runs, durability everysec"
  cluster_up everysec
  remote=(--server "127.0.0.1:$base" -p kvs.fabric="$fabric" -p kvs.device=sim0)
  "$D" load "${remote[@]}" "${wl[@]}" --depth 16 >"$root/load.out" 2>&1 ||
    die_log "$root/load.out" "loading the cluster for the snapshot runs failed"
  timed() { # name
    drive "$1" run "${remote[@]}" "${wl[@]}" -p operationcount=1000000000 \
      -p maxexecutiontime="$SNAP_SECS" --depth "$DEPTH"
  }
  timed snap-before
  touch "$root/snapping"
  (
    while [ -e "$root/snapping" ]; do
      "${admin[@]}" snapshot >>"$root/snap-admin.log" 2>&1 || true
      echo x >>"$root/snaps"
    done
  ) &
  snapper=$!
  pids+=("$snapper")
  timed snap-during
  rm -f "$root/snapping"
  wait "$snapper" 2>/dev/null || true
  forget "$snapper"
  timed snap-after
  snaps=$(wc -l <"$root/snaps" 2>/dev/null || echo 0)
  cluster_down
  before=$(cut -d' ' -f1 "$root/res/snap-before" | tail -n1 | awk '{printf "%.0f", $1}')
  during=$(cut -d' ' -f1 "$root/res/snap-during" | tail -n1 | awk '{printf "%.0f", $1}')
  after=$(cut -d' ' -f1 "$root/res/snap-after" | tail -n1 | awk '{printf "%.0f", $1}')
  snap_ratio=$(awk -v b="$before" -v d="$during" -v a="$after" 'BEGIN {printf "%.2f", d / ((b + a) / 2)}')
  snapshot_figure="$before ops/s before, $during during ($snaps snapshot rounds of every member), $after after: $snap_ratio"
fi

# --- the table ----------------------------------------------------------------

col() { cut -d' ' -f"$2" "$root/res/$1" | median; }
have() { [ -s "$root/res/$1" ]; }
# Median over the repetitions of A's throughput / B's, paired by repetition,
# and the ratios themselves.
ratio() { # a b
  if ! have "$1" || ! have "$2"; then
    echo "-"
    return
  fi
  paste -d' ' <(cut -d' ' -f1 "$root/res/$1") <(cut -d' ' -f1 "$root/res/$2") |
    awk '{printf "%.2f\n", $1 / $2}' >"$root/ratio"
  printf '%s (%s)' "$(median <"$root/ratio")" "$(paste -sd' ' "$root/ratio")"
}
goal() { # ratio-text goal
  awk -v r="${1%% *}" -v g="$2" 'BEGIN {if (r == "-") print ""; else if (r + 0 >= g) print "goal >= " g ": met"; else print "goal >= " g ": MISSED"}'
}
row() { # label name
  if have "$2"; then
    printf '%-30s %9.0f %9s %9s %9s %9s\n' "$1" "$(col "$2" 1)" "$(col "$2" 2)" "$(col "$2" 3)" \
      "$(col "$2" 4)" "$(col "$2" 5)"
  fi
}
wrow() { # label name
  local f="$root/res/$2.w"
  [ -s "$f" ] || return 0
  printf '%-30s %6s/s %6s changes   R %3s%%  S %3s%%  D %3s%% (%s)\n' "$1" \
    "$(cut -d' ' -f1 "$f" | median)" "$(cut -d' ' -f2 "$f" | median)" "$(cut -d' ' -f3 "$f" | median)" \
    "$(cut -d' ' -f4 "$f" | median)" "$(cut -d' ' -f5 "$f" | median)" "$(cut -d' ' -f6 "$f" | sort | uniq -c | sort -rn | awk 'NR==1 {print $2}')"
}

echo
echo "== Figures: medians of $RUNS; ratios: the median of each repetition's ratio (each one in brackets)"
echo "YCSB-A, $RECORDS records, $THREADS driver threads; kvs: 3 members x $WORKERS workers, replicas = 2"
printf '%-30s %9s %9s %9s %9s %9s\n' "" "ops/s" "READ p50" "READ p99" "UPD p50" "UPD p99"
label() { [ "${1#before-}" = "$1" ] && echo "$1" || echo "before ${1#before-}"; }
for s in "${kvs_settings[@]}"; do row "kvs $(label "$s"), depth $DEPTH" "kvs-$s-d$DEPTH"; done
for s in "${kvs_settings[@]}"; do row "kvs $(label "$s"), depth 1" "kvs-$s-d1"; done
row "Redis appendonly no, depth $DEPTH" "redis-no-d$DEPTH"
for s in everysec always; do row "Redis $s, depth $DEPTH" "redis-$s-d$DEPTH"; done
row "Redis appendonly no, depth 1" redis-no-d1
row "Redis always, depth 1" redis-always-d1
echo "(latencies in us)"
echo "kvs logs and workers: log writes a second a worker, changes a write (both members' copies);"
echo "worker threads' samples: running (R), sleeping (S), waiting for the disk (D, where, most often)"
for s in "${kvs_settings[@]}"; do wrow "kvs $(label "$s"), depth $DEPTH" "kvs-$s-d$DEPTH"; done
for s in "${kvs_settings[@]}"; do wrow "kvs $(label "$s"), depth 1" "kvs-$s-d1"; done
for b in "" before-; do
  [ -z "$b" ] || [ -n "$BEFORE" ] || continue
  w=${b:+before, }
  if setting everysec && setting none; then
    r=$(ratio "kvs-${b}everysec-d$DEPTH" "kvs-${b}none-d$DEPTH")
    echo "kvs ${w}everysec / none, depth $DEPTH: $r  $(goal "$r" 0.9)"
  fi
  if setting always && setting none; then
    r=$(ratio "kvs-${b}always-d$DEPTH" "kvs-${b}none-d$DEPTH")
    echo "kvs ${w}always / none, depth $DEPTH: $r  $(goal "$r" 0.5)"
    echo "kvs ${w}always / none, depth 1: $(ratio "kvs-${b}always-d1" "kvs-${b}none-d1")"
  fi
  if setting always; then
    echo "kvs ${w}always, depth $DEPTH / depth 1 (group commit):" \
      "$(ratio "kvs-${b}always-d$DEPTH" "kvs-${b}always-d1")"
  fi
done
if [ -n "$BEFORE" ]; then
  for s in "${kvs_settings[@]}"; do
    [ "${s#before-}" = "$s" ] || continue
    echo "kvs $s, this build / before, depth $DEPTH: $(ratio "kvs-$s-d$DEPTH" "kvs-before-$s-d$DEPTH")"
  done
fi
if [ "$redis" = 1 ]; then
  echo "Redis everysec / no, depth $DEPTH: $(ratio "redis-everysec-d$DEPTH" "redis-no-d$DEPTH")"
  echo "Redis always / no, depth $DEPTH: $(ratio "redis-always-d$DEPTH" "redis-no-d$DEPTH")"
  echo "Redis always / no, depth 1: $(ratio redis-always-d1 redis-no-d1)"
  echo "Redis always, depth $DEPTH / depth 1: $(ratio "redis-always-d$DEPTH" redis-always-d1)"
  for s in none:no everysec:everysec always:always; do
    echo "kvs / Redis, ${s%%:*} vs ${s##*:}, depth $DEPTH: $(ratio "kvs-${s%%:*}-d$DEPTH" "redis-${s##*:}-d$DEPTH")"
  done
  for s in none:no always:always; do
    echo "kvs / Redis, ${s%%:*} vs ${s##*:}, depth 1: $(ratio "kvs-${s%%:*}-d1" "redis-${s##*:}-d1")"
  done
fi
if part settings; then
  echo "disk: 4 KiB O_DSYNC write $(median <"$root/res/dsync-us") us ($DSYNC_WRITES writes);" \
    "sequential write $(median <"$root/res/seqwrite-mbs") MB/s ($SEQ_MB MiB + fdatasync)"
fi
if part recovery; then
  # The medians, each over the REPLAY_RUNS restarts; the ratio is the median
  # of each restart's replay rate over its dd's.
  rcol() { median <"$root/res/replay-$1"; }
  echo "recovery ($REPLAY_RECORDS records, $REPLAY_WORKERS workers, durability $REPLAY_DURABILITY," \
    "kill -9; medians of $REPLAY_RUNS restarts): $r_changes changes, $((r_bytes / 1000000)) MB" \
    "recovered in $(rcol secs) s: $(rcol mbs) MB/s ($(paste -sd' ' "$root/res/replay-mbs"));" \
    "restart to listening $(rcol up) s"
  echo "  files out of the cache before the replay: $cache_how ($cache_left bytes still cached)"
  echo "  CPU time of the restarted member when it listened: $(rcol cpu) s:" \
    "$(rcol cpu-mbs) MB a CPU-second"
  echo "  replay with the files cached: $(rcol warm-mbs) MB/s"
  echo "  dd sequential read of the files ($((wal_bytes / 1000000)) MB): $(rcol dd-mbs) MB/s" \
    "($(paste -sd' ' "$root/res/replay-dd-mbs")); out of the cache before it: $dd_how ($dd_left bytes still cached)"
  r="$(rcol ratio) ($(paste -sd' ' "$root/res/replay-ratio"))"
  echo "  replay / dd: $r  $(goal "$r" 0.5)"
fi
part snapshots && echo "throughput during snapshots: $snapshot_figure  $(goal "$snap_ratio" 0.85)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
