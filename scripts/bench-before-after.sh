#!/usr/bin/env bash
# A change's cost: two builds of copyrpc-bench and the copyrpc step bench,
# alternated on the same machine, medians of ROUNDS; then the step bench's
# instruction count under callgrind (noise-free).
#   bash scripts/bench-before-after.sh OLD_DIR NEW_DIR [ROUNDS]
# Each directory holds `copyrpc-bench` (target/release) and `step` (the binary
# `cargo bench -p copyrpc --bench step --no-run` names), built from the two
# commits.
set -u
OLD=${1:?OLD_DIR}; NEW=${2:?NEW_DIR}; R=${3:-5}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
rpc() { "$1/copyrpc-bench" client --spawn --payload 32 --duration 3 "${@:2}" 2>/dev/null |
    sed -E 's/.*: ([0-9.]+) Mrps; round trip p50 ([0-9.]+) us, p99 ([0-9.]+) us.*/\1 \2 \3/'; }
T=$(mktemp -d)
for _ in $(seq "$R"); do
  for v in OLD NEW; do d=${!v}
    rpc "$d" --depth 512 --poll-every 64 | awk '{print $1}' >> "$T/$v.rate"
    rpc "$d" --depth 1 | awk '{print $2}' >> "$T/$v.rtt"
    STEP_RPCS=500000 "$d/step" 1 16 2>/dev/null | sed -nE 's/.*depth +([0-9]+): +([0-9.]+) ns.*/\1 \2/p' >> "$T/$v.step"
  done
done
for v in OLD NEW; do
  printf '%s: rate %s Mrps (depth 512, poll every 64); round trip p50 %s us (depth 1); step bench %s ns/RPC at depth 1, %s at depth 16\n' "$v" \
    "$(median < "$T/$v.rate")" "$(median < "$T/$v.rtt")" \
    "$(awk '$1==1 {print $2}' "$T/$v.step" | median)" "$(awk '$1==16 {print $2}' "$T/$v.step" | median)"
done
if command -v valgrind >/dev/null; then
  for v in OLD NEW; do
    STEP_RPCS=100000 valgrind --tool=callgrind --callgrind-out-file="$T/$v.cg" "${!v}/step" 1 >/dev/null 2>&1
    echo "$v: callgrind instructions, step bench depth 1 (5 runs of 100000 RPCs): $(callgrind_annotate "$T/$v.cg" 2>/dev/null | awk '/PROGRAM TOTALS/ {print $1}')"
  done
fi
rm -rf "$T"
