#!/usr/bin/env bash
# mpib on the software device beside its peers, same machine, same run:
# single-thread memcpy (the limit of a copy on one host) and ucx_perftest's
# ucp_put_bw over shared memory (UCX_TLS=posix,self). Then two rails of
# unequal speed under the device's link model: the static and adaptive splits
# against the sum of the rates. Each figure is the median of RUNS runs; mpib,
# memcpy and UCX alternate so that all see the same phases of a noisy machine.
#
#   bash scripts/bench-mpib.sh        (needs: apt-get install ucx-utils)
#   RUNS=5 DUR=2 LINKS=24,8 bash scripts/bench-mpib.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
DUR=${DUR:-1}
SIZES=${SIZES:-4K,64K,1M,16M,64M}
LINKS=${LINKS:-24,8}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing: apt-get install ucx-utils"; exit 1; }
cargo build -q --release -p mpib --bin mpib-bench
B=target/release/mpib-bench

# glibc copies 4 KiB .. ~1 MiB with `rep movsb` on CPUs that advertise fast
# string moves (ERMS/FSRM). On the VMs this project runs on that instruction
# is ~30x slower than glibc's vector loop (4 KiB: 1.5 us against 45 ns), so
# every copy in that range -- the software device's DMA, memcpy's, UCX's --
# would measure the hypervisor. Raising the threshold makes glibc use its
# vector loop for all of them alike. Set MPIB_BENCH_KEEP_REP_MOVSB=1 to see
# the machine as it is.
if [ -z "${MPIB_BENCH_KEEP_REP_MOVSB:-}" ]; then
  export GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=4294967295
fi

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "nan"}'; }
bytes() { numfmt --from=iec "$1"; }
T=$(mktemp -d /tmp/bench-mpib.XXXXXX)
trap 'rm -rf "$T"' EXIT

# mpib-bench ARGS... -> appends "size GB/s" to $T/<tag>.<size>, memcpy likewise.
mpib() { local tag=$1; shift
  "$B" --spawn --duration "$DUR" "$@" | while read -r a b c d _; do
    case "$a" in
      memcpy) echo "$d" >> "$T/memcpy.${b}" ;;
      [0-9]*) echo "$c" >> "$T/$tag.$a" ;;
    esac
  done
}
ucx() { # size -> GB/s of ucp_put_bw (UCX's MB is 2^20 bytes)
  local s=$1 n port=$((13000 + RANDOM % 2000))
  n=$(( (8 << 30) / s )); [ "$n" -gt 200000 ] && n=200000; [ "$n" -lt 50 ] && n=50
  UCX_TLS=posix,self timeout 120 ucx_perftest -p "$port" -t ucp_put_bw -s "$s" -n "$n" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  UCX_TLS=posix,self timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t ucp_put_bw -s "$s" -n "$n" 2>/dev/null |
    awk '/^Final/ {printf "%.3f\n", $7 * 1048576 / 1e9}'
  wait "$srv" || true
}

for i in $(seq "$RUNS"); do
  echo "run $i of $RUNS" >&2
  mpib r2 --rails 2 --sizes "$SIZES"
  mpib r1 --rails 1 --sizes "$SIZES"
  for s in ${SIZES//,/ }; do ucx "$(bytes "$s")" >> "$T/ucx.$(bytes "$s")"; done
done

echo "== mpib without a link model (the software device at memory speed): medians of $RUNS runs, GB/s"
printf '%10s %9s %9s %9s %11s %14s %12s\n' size "2 rails" "1 rail" memcpy ucp_put_bw "2 rails/memcpy" "2 rails/UCX"
for s in ${SIZES//,/ }; do
  n=$(bytes "$s")
  r2=$(median < "$T/r2.$n"); r1=$(median < "$T/r1.$n"); m=$(median < "$T/memcpy.$n"); u=$(median < "$T/ucx.$n")
  printf '%10s %9s %9s %9s %11s %14.2f %12.2f\n' "$n" "$r2" "$r1" "$m" "$u" \
    "$(awk -v a="$r2" -v b="$m" 'BEGIN {print a / b}')" "$(awk -v a="$r2" -v b="$u" 'BEGIN {print a / b}')"
done

IFS=, read -r g0 g1 <<< "$LINKS"
sum=$(awk -v a="$g0" -v b="$g1" 'BEGIN {print (a + b) / 8}')
slow=$(awk -v a="$g0" -v b="$g1" 'BEGIN {print (a < b ? a : b) / 8}')
LSIZES=${LSIZES:-64K,1M,16M,64M}
for i in $(seq "$RUNS"); do
  echo "link run $i of $RUNS" >&2
  mpib ls --link-gbps "$LINKS" --policy static --sizes "$LSIZES"
  mpib la --link-gbps "$LINKS" --policy adaptive --sizes "$LSIZES"
done
echo
echo "== link model: rail 0 at $g0 Gbit/s, rail 1 at $g1 Gbit/s (sum $sum GB/s): medians of $RUNS runs, GB/s"
printf '%10s %9s %9s %14s %20s\n' size static adaptive "adaptive/sum" "static/(2 x slower)"
for s in ${LSIZES//,/ }; do
  n=$(bytes "$s")
  st=$(median < "$T/ls.$n"); ad=$(median < "$T/la.$n")
  printf '%10s %9s %9s %14.2f %20.2f\n' "$n" "$st" "$ad" \
    "$(awk -v a="$ad" -v b="$sum" 'BEGIN {print a / b}')" "$(awk -v a="$st" -v b="$slow" 'BEGIN {print a / (2 * b)}')"
done
