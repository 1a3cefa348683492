#!/bin/sh
# YCSB workload A against kvs-server, as two processes over an RDMA device
# (rxe0 in the guest: run-tests.sh runs this there). Every operation must come
# back Return=OK with its data verified (dataintegrity), and the server must
# stop cleanly on Ctrl-C.
#
#   scripts/rxe/ycsb-a.sh BIN_DIR [DEVICE]
#
# BIN_DIR holds kvs-server, kvs-client and ycsb-driver.
set -eu
BIN=$1
DEV=${2:-rxe0}
ADDR=127.0.0.1:7700
RECORDS=200
OPS=2000
OUT=$(mktemp -d)

fail() { echo "ycsb-a: $*" >&2; for f in "$OUT"/*; do echo "--- $f" >&2; cat "$f" >&2; done; exit 1; }

"$BIN/kvs-server" --listen "$ADDR" --workers 2 --device "$DEV" --stats-interval 0 \
    >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill -9 $SERVER 2>/dev/null || true' EXIT

# The listener is up once a client gets through; a put and a get on the way.
up=0
for _ in $(seq 1 100); do
    if "$BIN/kvs-client" --server "$ADDR" --device "$DEV" put probe hello >/dev/null 2>&1; then
        up=1
        break
    fi
    sleep 0.2
done
[ "$up" = 1 ] || fail "kvs-server did not come up on $DEV"
[ "$("$BIN/kvs-client" --server "$ADDR" --device "$DEV" get probe)" = hello ] ||
    fail "kvs-client get probe"

drive() {
    timeout 300 "$BIN/ycsb-driver" "$1" -P workloada \
        -p recordcount=$RECORDS -p operationcount=$OPS -p dataintegrity=true \
        -p kvs.device="$DEV" --server "$ADDR" -threads 2 --depth 4
}
drive load >"$OUT/load.txt" 2>"$OUT/load.err" || fail "ycsb-driver load failed"
grep -qx "\[INSERT\], Return=OK, $RECORDS" "$OUT/load.txt" || fail "load: not every INSERT OK"
drive run >"$OUT/run.txt" 2>"$OUT/run.err" || fail "ycsb-driver run failed"
ok=$(awk -F', ' '/^\[(READ|UPDATE)\], Return=OK, /{s += $3} END{print s + 0}' "$OUT/run.txt")
[ "$ok" = "$OPS" ] || fail "run: $ok of $OPS operations OK"
if grep -q 'Return=ERROR\|UNEXPECTED\|Return=NOT_FOUND' "$OUT/run.txt"; then
    fail "run: an operation failed"
fi

# Ctrl-C: the server answers or fails what is in flight and exits 0.
kill -INT "$SERVER"
rc=0
wait "$SERVER" || rc=$?
trap - EXIT
[ "$rc" = 0 ] || fail "kvs-server exited $rc on SIGINT"
grep -E '^\[(OVERALL|READ|UPDATE)\]' "$OUT/run.txt" | grep -v 'Percentile\|Min\|Max' | head -20
echo "ycsb-a: workload A on $DEV: $RECORDS records loaded, $OPS operations, every one OK and verified"
rm -rf "$OUT"
