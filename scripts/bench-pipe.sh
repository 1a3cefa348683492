#!/usr/bin/env bash
# kvs-client's bulk and one-shot modes beside redis-cli's, in one run:
#  1. --pipe: LINES puts of VALUE-byte values, then LINES gets of them, at
#     depth DEPTH, through `kvs-client --pipe` against one kvs-server
#     (WORKERS workers, the software device), and through `redis-cli
#     --pipe` (the same commands in Redis's protocol) against redis-server
#     (no persistence); commands per second over the whole run of each
#     client process, connection included.
#  2. One process per command: ONESHOT runs of `kvs-client get` and of
#     `redis-cli get`, each a process that connects, asks once and exits:
#     what a shell or --pipe saves a quick look at twenty keys.
#  Each repetition (RUNS) runs ours then Redis's; the figures are medians,
#  the ratio the median of the repetitions' ratios.
#
#   bash scripts/bench-pipe.sh
#   RUNS=5 LINES=500000 DEPTH=128 bash scripts/bench-pipe.sh
# Also: VALUE (bytes, default 100), WORKERS (default 2), ONESHOT (default 50),
# SKIP_REDIS=1, BIN (a directory holding kvs-server and kvs-client to run
# instead of building them).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
LINES=${LINES:-200000}
DEPTH=${DEPTH:-64}
VALUE=${VALUE:-100}
WORKERS=${WORKERS:-2}
ONESHOT=${ONESHOT:-50}

die() { echo "bench-pipe: $*" >&2; exit 1; }
if [ -n "${BIN:-}" ]; then
  S=$BIN/kvs-server C=$BIN/kvs-client
else
  cargo build -q --release -p kvs-server -p kvs-client
  S=target/release/kvs-server C=target/release/kvs-client
fi
redis=1
if [ "${SKIP_REDIS:-0}" = 1 ]; then
  redis=0
elif ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  echo "(redis-server not installed: apt-get install -y redis-server; Redis is left out)" >&2
  redis=0
fi

root=$(mktemp -d "${TMPDIR:-/tmp}/bench-pipe.XXXXXX")
fabric="bench-pipe-$$"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$root" /dev/shm/mlx5sim-"$fabric"*
}
trap cleanup EXIT

# A free loopback port.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The commands, in our syntax and in Redis's protocol.
python3 - "$LINES" "$VALUE" "$root" <<'PY'
import sys
n, size, root = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def resp(*w):
    out = b"*%d\r\n" % len(w)
    for x in w:
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    return out
with open(root + "/kvs.txt", "wb") as k, open(root + "/redis.resp", "wb") as r:
    for op in (b"put", b"get"):
        for i in range(n):
            key = b"key%d" % i
            val = (b"%d:" % i).ljust(size, b"v")
            if op == b"put":
                k.write(b"put %s %s\n" % (key, val))
                r.write(resp(b"SET", key, val))
            else:
                k.write(b"get %s\n" % key)
                r.write(resp(b"GET", key))
PY

port=$(free_port)
"$S" --listen "127.0.0.1:$port" --fabric "$fabric" --device sim1 --workers "$WORKERS" \
  --stats-interval 0 >"$root/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  grep -q "listening on" "$root/server.log" 2>/dev/null && break
  kill -0 "${pids[-1]}" 2>/dev/null || { cat "$root/server.log" >&2; die "kvs-server exited"; }
  sleep 0.1
done
client=("$C" --server "127.0.0.1:$port" --fabric "$fabric" --device sim0)
if [ "$redis" = 1 ]; then
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --dir "$root" --save "" --appendonly no \
    >"$root/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    [ "$(redis-cli -p "$rport" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
  done
fi

now() { date +%s.%N; }
# Commands per second of $1 commands between times $2 and $3.
rate() { python3 -c "import sys; print(round(int(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2]))))" "$@"; }
median() { python3 -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

cmds=$((2 * LINES))
ours=() theirs=() ratios=() ours1=() theirs1=()
for ((r = 1; r <= RUNS; r++)); do
  t0=$(now)
  "${client[@]}" --pipe --depth "$DEPTH" <"$root/kvs.txt" >/dev/null 2>"$root/pipe.err" ||
    { cat "$root/pipe.err" >&2; die "kvs-client --pipe failed"; }
  t1=$(now)
  grep -q "$cmds commands: $cmds ok (0 not found), 0 errors" "$root/pipe.err" ||
    { cat "$root/pipe.err" >&2; die "kvs-client --pipe: not every command was answered OK"; }
  ours+=("$(rate "$cmds" "$t0" "$t1")")
  t0=$(now)
  for ((i = 0; i < ONESHOT; i++)); do "${client[@]}" get key1 >/dev/null 2>&1; done
  t1=$(now)
  ours1+=("$(python3 -c "print(round(($t1 - $t0) / $ONESHOT * 1000, 1))")")
  if [ "$redis" = 1 ]; then
    t0=$(now)
    redis-cli -p "$rport" --pipe <"$root/redis.resp" >"$root/redis-pipe.out" 2>&1 ||
      { cat "$root/redis-pipe.out" >&2; die "redis-cli --pipe failed"; }
    t1=$(now)
    grep -q "errors: 0, replies: $cmds" "$root/redis-pipe.out" ||
      { cat "$root/redis-pipe.out" >&2; die "redis-cli --pipe: not every reply came back"; }
    theirs+=("$(rate "$cmds" "$t0" "$t1")")
    ratios+=("$(python3 -c "print(${ours[-1]} / ${theirs[-1]})")")
    t0=$(now)
    for ((i = 0; i < ONESHOT; i++)); do redis-cli -p "$rport" get key1 >/dev/null; done
    t1=$(now)
    theirs1+=("$(python3 -c "print(round(($t1 - $t0) / $ONESHOT * 1000, 1))")")
  fi
  echo "run $r: kvs-client --pipe ${ours[-1]}/s${theirs:+, redis-cli --pipe ${theirs[-1]}/s}; one-shot ${ours1[-1]} ms${theirs1:+ (redis-cli ${theirs1[-1]} ms)}"
done

echo
echo "--pipe, $LINES puts of $VALUE B then $LINES gets, depth $DEPTH, $WORKERS workers (medians of $RUNS):"
echo "  kvs-client --pipe   $(median "${ours[@]}") commands/s"
if [ "$redis" = 1 ]; then
  echo "  redis-cli --pipe    $(median "${theirs[@]}") commands/s"
  echo "  ratio (ours/Redis)  $(median "${ratios[@]}")"
fi
echo "one process per command ($ONESHOT runs of get):"
echo "  kvs-client get      $(median "${ours1[@]}") ms each"
[ "$redis" = 1 ] && echo "  redis-cli get       $(median "${theirs1[@]}") ms each"
echo "(load average: $(cut -d' ' -f1-3 /proc/loadavg))"
