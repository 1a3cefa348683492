#!/bin/bash
# The project's real-RDMA suite: everything that runs on kernel soft-RoCE
# (rdma_rxe, rdma-core's rxe provider -- an RDMA implementation none of us
# wrote), in ONE boot of a throw-away qemu guest (scripts/rxe/guest.sh).
#
#   scripts/rxe/run-tests.sh            # build on the host, run in the guest
#
# Needs root for the first run (apt-get: qemu, busybox, rdma-core; the Debian
# kernel is downloaded once into ~/.cache/rxe-guest). Under qemu's emulation
# traffic is slow (~0.5 ms per round trip): this is for correctness only.
#
# What runs in the guest, on rxe0 (and rxe1: the guest has two virtio NICs,
# one rxe device on each):
#   1. mlx5 hw_control     -- the control path (PD/MR/CQ/SRQ/QP, RESET..RTS,
#                             RoCE v2 GID, errors naming the verb and errno)
#      mlx5 huge_pages     -- MRs in 2 MiB huge pages: the pool drains page by
#                             page, then normal pages; pages back on drop
#   2. mlx5 differential   -- the RC scenarios on sim and on rxe, compared
#      mlx5 events_rxe     -- completion events: one per arm (ibv_req_notify_cq
#                             and a completion channel), solicited-only arms,
#                             a sleeping poller against a sender, none lost
#   3. copyrpc rxe         -- echo, wrap, out-of-order replies, flow-control
#                             interleavings, READ fallback, removal, rings in
#                             huge pages, over the verbs path
#   4. mpib rxe            -- dual-rail transfers, rail 0 on rxe0 and rail 1
#                             on rxe1 (and one test with both rails on rxe0):
#                             every split and 0-byte transfer, 1..8 buffers,
#                             the fast and the record path, a pipelined run
#                             with no RNR (rxe's own counters), bad peers and
#                             vanished peers, over the verbs path
#   5. ycsb-a              -- kvs-server and ycsb-driver as two processes,
#                             YCSB workload A, every operation OK and verified
#                             (scripts/rxe/ycsb-a.sh)
#      ycsb-a-huge         -- the same with kvs-server --huge-pages: both
#                             workers say their rings are in huge pages, and
#                             HugePages_Free drops by the rings' pages while
#                             it runs (HUGE=1 scripts/rxe/ycsb-a.sh)
# The guest reserves HUGE_PAGES 2 MiB pages (64 MiB of its 1 GiB) first.
set -euo pipefail
cd "$(dirname "$0")/../.."
GUEST_TIMEOUT=${RXE_TESTS_TIMEOUT:-400}
HUGE_PAGES=32

log() { echo "[rxe-tests] $*" >&2; }

# ------------------------------------------------------------- 1. build
log "building test binaries"
test_bin() { # package test-target -> path of the test executable
    cargo test -q -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$2" | tail -1
}
HW_CONTROL=$(test_bin mlx5 hw_control)
HUGE_TEST=$(test_bin mlx5 huge_pages)
DIFFERENTIAL=$(test_bin mlx5 differential)
EVENTS=$(test_bin mlx5 events_rxe)
COPYRPC=$(test_bin copyrpc rxe)
MPIB=$(test_bin mpib rxe)
cargo build -q -p kvs-server -p kvs-client -p ycsb-driver --bins
BIN=$(cargo metadata -q --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/debug
for b in "$HW_CONTROL" "$HUGE_TEST" "$DIFFERENTIAL" "$EVENTS" "$COPYRPC" "$MPIB" "$BIN/kvs-server" "$BIN/kvs-client" "$BIN/ycsb-driver"; do
    [ -x "$b" ] || { log "missing test binary: $b"; exit 1; }
done

# ------------------------------------------------------- 2. guest script
WORK=$(mktemp -d /tmp/rxe-tests.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/guest.sh" <<EOF
fail=0
step() { name=\$1; shift; echo "@@ step \$name"; t0=\$(date +%s)
    if "\$@"; then echo "@@ ok \$name (\$((\$(date +%s) - t0)) s)"
    else echo "@@ FAILED \$name (rc \$?)"; fail=1; fi; }
export MLX5_SIM_FABRIC=rxe-tests RUST_BACKTRACE=1
echo $HUGE_PAGES > /proc/sys/vm/nr_hugepages
echo "@@ huge pages: \$(grep -E '^HugePages_(Total|Free)' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
step hw_control env MLX5_TEST_DEVICE=rxe0 $HW_CONTROL --ignored --test-threads=1
step huge_pages env MLX5_TEST_DEVICE=rxe0 $HUGE_TEST --ignored --test-threads=1 --nocapture
step differential env MLX5_DIFF_DEVICE=rxe0 $DIFFERENTIAL --test-threads=1 --nocapture
step events env MLX5_TEST_DEVICE=rxe0 $EVENTS --ignored --test-threads=1
step copyrpc env COPYRPC_TEST_DEVICE=rxe0 $COPYRPC --ignored --test-threads=1
step mpib env MPIB_TEST_DEVICE=rxe0 MPIB_TEST_DEVICE2=rxe1 $MPIB --ignored --test-threads=1
step ycsb-a sh $PWD/scripts/rxe/ycsb-a.sh $BIN rxe0
step ycsb-a-huge env HUGE=1 sh $PWD/scripts/rxe/ycsb-a.sh $BIN rxe0
exit \$fail
EOF

# ------------------------------------------------------------ 3. one boot
log "booting the guest"
# The guest sees the host's root read-only, but its /tmp is empty: share the
# checkout itself (CI clones under /tmp) and the work directory. Status 125
# means no status came back (the guest did not boot or hung): one more boot.
for attempt in 1 2; do
    set +e
    scripts/rxe/guest.sh --nics 2 --share "$PWD" --share "$WORK" --timeout "$GUEST_TIMEOUT" -- "sh $WORK/guest.sh" 2>&1 |
        tee "$WORK/console.log"
    rc=${PIPESTATUS[0]}
    set -e
    [ "$rc" -eq 125 ] && [ "$attempt" -eq 1 ] && { log "no status from the guest; booting again"; continue; }
    break
done
grep -E '^@@ (ok|FAILED)' "$WORK/console.log" || true
if [ "$rc" -ne 0 ]; then log "FAILED (guest status $rc)"; exit "$rc"; fi
log "all steps passed on rxe0 and rxe1"
