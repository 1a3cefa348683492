#!/bin/sh
# YCSB workload A against kvs-server, as two processes over an RDMA device
# (rxe0 in the guest: run-tests.sh runs this there). Every operation must come
# back Return=OK with its data verified (dataintegrity), and the server must
# stop cleanly on Ctrl-C.
#
#   scripts/rxe/ycsb-a.sh BIN_DIR [DEVICE]
#   HUGE=1 scripts/rxe/ycsb-a.sh BIN_DIR [DEVICE]
#
# BIN_DIR holds kvs-server, kvs-client and ycsb-driver.
#
# With HUGE=1 the server runs with --huge-pages, and 2 MiB pages must be
# reserved (vm.nr_hugepages; run-tests.sh reserves them in the guest): each
# worker must say its rings are in huge pages, HugePages_Free must drop by
# at least a client's rings (2 workers x 2 rings x 1 page, 1 MiB rings) while
# the clients are connected, and come back once the server has exited.
set -eu
BIN=$1
DEV=${2:-rxe0}
HUGE=${HUGE:-0}
ADDR=127.0.0.1:7700
RECORDS=200
OPS=2000
OUT=$(mktemp -d)

fail() { echo "ycsb-a: $*" >&2; for f in "$OUT"/*; do echo "--- $f" >&2; cat "$f" >&2; done; exit 1; }
free_huge() { awk '/^HugePages_Free:/{print $2}' /proc/meminfo; }

EXTRA=
SAMPLER=
if [ "$HUGE" = 1 ]; then
    EXTRA=--huge-pages
    FREE0=$(free_huge)
    [ "${FREE0:-0}" -ge 8 ] || fail "HUGE=1 needs 8 free huge pages or more (vm.nr_hugepages); $(grep HugePages_ /proc/meminfo | tr '\n' ' ')"
    echo "ycsb-a: huge pages before the server: $(grep -E '^HugePages_(Total|Free|Rsvd)' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
    # HugePages_Free every 0.1 s while the server runs: its lowest value.
    ( while :; do free_huge; sleep 0.1; done ) >"$OUT/free.txt" &
    SAMPLER=$!
fi

"$BIN/kvs-server" --listen "$ADDR" --workers 2 --device "$DEV" --stats-interval 0 $EXTRA \
    >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill -9 $SERVER $SAMPLER 2>/dev/null || true' EXIT

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
if [ "$HUGE" = 1 ]; then
    kill "$SAMPLER" 2>/dev/null || true
    wait "$SAMPLER" 2>/dev/null || true
    LOWEST=$(sort -n "$OUT/free.txt" | head -1)
    AFTER=$(free_huge)
    grep 'huge_pages' "$OUT/server.log" || true
    echo "ycsb-a: HugePages_Free before the server $FREE0, lowest while it ran $LOWEST, after it exited $AFTER"
    for w in 0 1; do
        grep -q " INFO kvs_server::serving::worker: worker $w: huge_pages: copyrpc rings in 2 MiB huge pages" "$OUT/server.log" ||
            fail "worker $w did not say its rings are in huge pages"
    done
    grep -q ' WARN kvs_server::serving::worker: worker [0-9]*: huge_pages' "$OUT/server.log" && fail "the server fell back to normal pages"
    [ $((FREE0 - LOWEST)) -ge 4 ] || fail "HugePages_Free dropped by $((FREE0 - LOWEST)) (want 4 or more: a client's rings)"
    [ "$AFTER" = "$FREE0" ] || fail "HugePages_Free is $AFTER after the server exited (was $FREE0)"
fi
grep -E '^\[(OVERALL|READ|UPDATE)\]' "$OUT/run.txt" | grep -v 'Percentile\|Min\|Max' | head -20
HOW=
[ "$HUGE" = 1 ] && HOW=", rings in huge pages ($((FREE0 - LOWEST)) pages at most)"
echo "ycsb-a: workload A on $DEV: $RECORDS records loaded, $OPS operations, every one OK and verified$HOW"
rm -rf "$OUT"
