#!/bin/bash
# Vendored from the team's shared tools (shared/tools/rxe-guest.sh, 2026-11-22)
# so that a clone of this repository carries its own soft-RoCE harness;
# scripts/rxe/run-tests.sh is the entry point that uses it.
# Local change: no_timer_check on the kernel command line. Under TCG on a busy
# host the kernel's IO-APIC timer check can fail and panic the boot ("IO-APIC +
# timer doesn't work!"), which we saw once in a few dozen boots.
# Local change: --nics N gives the guest N virtio NICs, NIC i with address
# 10.0.(2+i).15/24 and soft-RoCE device rxe<i> on it (default 1: rxe0 only).
# rxe-guest.sh -- run a command inside a throw-away qemu guest whose Debian
# kernel has the soft-RoCE driver rdma_rxe, with an rxe device (rxe0 on the
# guest's virtio NIC) already created, so real RDMA verbs traffic works even
# though the host kernel has no RDMA support at all.
#
# The guest's root filesystem IS the host's root filesystem, shared read-only
# over virtio-9p: the guest runs the host's own userspace (libibverbs + rxe
# provider, rdma tool, ibv_* utils, and your own dynamically linked test
# binaries, e.g. a Rust binary that dlopen()s libibverbs.so.1).  In the guest,
# /tmp, /run, /var/tmp are empty tmpfs; use --share to make a host directory
# writable (and visible, if it lives under /tmp) at the same path.
#
# Usage:
#   rxe-guest.sh [options] [--] [command [args...]]
#     (no command)      built-in smoke test: ibv_devices, ibv_devinfo,
#                       3 x ibv_rc_pingpong (server+client in the guest)
#     one argument      a shell snippet, run with /bin/sh -c in the guest
#     several args      a program + args (quoted as given) -- this form works
#                       as a cargo runner, see the end of this comment
#   The guest command's exit status is this script's exit status (125: no
#   status came back -- timeout or crash; console in $RXE_DIR/last-console.log).
#   Its cwd is the caller's cwd (read-only unless inside a --share dir), and
#   variables named CARGO_* RUST_* and those listed in $RXE_PASS_ENV are passed.
#   Options:
#     --share DIR       mount host DIR read-WRITE at the same path (repeatable)
#     --mem MB          guest memory (default 1024)
#     --smp N           guest vCPUs (default 2)
#     --timeout S       hard limit for the qemu run (default 180)
#     --nics N          N virtio NICs, rxe0 .. rxe<N-1> one on each (default 1)
#     --accel kvm|tcg   default: auto (kvm only if the CPU has vmx/svm and the
#                       host KVM is not PVM -- see the note at step 5)
#     --setup-only      install packages, fetch kernel, build initramfs, exit
#     --no-install      never call apt-get
#   Env: RXE_DIR (default ~/.cache/rxe-guest) work dir; RXE_KPKG to pin the kernel
#   package (default: whatever linux-image-amd64 depends on); RXE_KLOG kernel
#   log args (default "quiet loglevel=3").
#
# Cargo runner example (each test binary then runs in its own guest):
#   CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="path/to/rxe-guest.sh --no-install --share $PWD/target --" cargo test
set -euo pipefail

RXE_DIR=${RXE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rxe-guest}
MEM=1024; SMP=2; NICS=1; TMO=180; SETUP_ONLY=0; DO_INSTALL=1; ACCEL=auto; SHARES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --share) SHARES+=("$(realpath "$2")"); shift 2;;
        --mem) MEM=$2; shift 2;;
        --smp) SMP=$2; shift 2;;
        --timeout) TMO=$2; shift 2;;
        --nics) NICS=$2; shift 2;;
        --accel) ACCEL=$2; shift 2;;
        --setup-only) SETUP_ONLY=1; shift;;
        --no-install) DO_INSTALL=0; shift;;
        --) shift; break;;
        -*) echo "rxe-guest: unknown option $1" >&2; exit 2;;
        *) break;;
    esac
done
CALLER_PWD=$PWD
SELF=$(realpath "$0")
mkdir -p "$RXE_DIR"
cd "$RXE_DIR"
log() { echo "[rxe-guest] $*" >&2; }

# ---------------------------------------------------------------- 1. packages
# qemu + static busybox + cpio for the guest's initramfs; rdma-core/ibverbs-*/
# iproute2 (rdma tool) are the HOST userspace the guest uses via the 9p root.
PKGS="qemu-system-x86 busybox-static cpio kmod xz-utils iproute2 rdma-core ibverbs-utils ibverbs-providers libibverbs1"
if [ $DO_INSTALL = 1 ]; then
    n_ok=$(dpkg-query -W -f='${db:Status-Abbrev}\n' $PKGS 2>/dev/null | grep -c '^ii' || true)
    if [ "$n_ok" -ne "$(echo $PKGS | wc -w)" ]; then
        log "installing: $PKGS"
        apt-get update -q >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $PKGS >&2
    fi
fi

# ----------------------------------------------------------- 2. guest kernel
# Debian's generic amd64 kernel: CONFIG_RDMA_RXE=m, CONFIG_9P_FS=m, virtio=m,
# CONFIG_PVH=y.  (The *cloud* flavour has neither RXE nor 9p -- don't use it.)
# Only vmlinuz, an uncompressed vmlinux, and the ~18 needed .ko files are kept.
#
# Modules (dependency order from modprobe --show-depends on the extracted tree).
# crc32_generic is not a declared dependency: rdma_rxe calls
# crypto_alloc_shash("crc32") when a device is created, and with no modprobe
# in the guest "rdma link add" then fails with "No such file or directory".
WANT_MODS="virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe"
if [ ! -s kernel/.kver ] || [ ! -s kernel/mods/order ]; then
    apt-cache show linux-image-amd64 >/dev/null 2>&1 || apt-get update -q >&2   # no package lists yet
    KPKG=${RXE_KPKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')}
    log "downloading $KPKG"
    rm -rf kernel dl && mkdir -p kernel/mods dl/x
    (cd dl && apt-get download "$KPKG" 2>&1 | grep -v unsandboxed >&2 || true)
    deb=$(ls dl/"${KPKG}"_*.deb | head -1)
    dpkg -x "$deb" dl/x
    kver=$(ls dl/x/lib/modules | head -1)
    depmod -b "$RXE_DIR/dl/x" "$kver"           # the .deb ships no modules.dep
    for m in $WANT_MODS; do
        modprobe -d "$RXE_DIR/dl/x" -S "$kver" --show-depends "$m" | awk '$1=="insmod"{print $2}'
    done | awk '!seen[$0]++' | while read -r ko; do
        b=$(basename "$ko"); cp "$ko" kernel/mods/"$b"; echo "$b" >> kernel/mods/order
    done
    cp dl/x/boot/vmlinuz-"$kver" dl/x/boot/config-"$kver" kernel/
    # Uncompressed ELF vmlinux: qemu boots it through the PVH entry point,
    # skipping real-mode setup and the in-guest XZ decompression (~4.5 s
    # under TCG).  If extraction fails we just boot the bzImage.
    off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' kernel/vmlinuz-"$kver" | head -1 | cut -d: -f1 || true)
    if [ -n "$off" ]; then tail -c +$((off + 1)) kernel/vmlinuz-"$kver" | xz -dc 2>/dev/null > kernel/vmlinux || true; fi
    [ "$(head -c 4 kernel/vmlinux 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] || rm -f kernel/vmlinux
    dpkg-deb -f "$deb" Package Version > kernel/.pkg
    echo "$kver" > kernel/.kver
    rm -rf dl                                      # 70 MB .deb + 400 MB tree
fi
KVER=$(cat kernel/.kver)
BOOTK=$RXE_DIR/kernel/vmlinuz-$KVER
[ -s kernel/vmlinux ] && BOOTK=$RXE_DIR/kernel/vmlinux

# ------------------------------------------------------------ 3. initramfs
# static busybox + modules + /init.  /init loads the modules, configures the
# NIC, mounts the host root (9p, ro) on /host, creates rxe0, chroots into
# /host to run /cmd.sh, prints "@@RXE_GUEST_RC=<status>", powers off.
if [ ! -s initramfs.cpio.gz ] || [ "$SELF" -nt initramfs.cpio.gz ] || [ kernel/.kver -nt initramfs.cpio.gz ]; then
    log "building initramfs for $KVER"
    rm -rf initramfs && mkdir -p initramfs/{bin,dev,proc,sys,host}
    cp /bin/busybox initramfs/bin/busybox
    cp -r kernel/mods initramfs/mods
    cat > initramfs/init <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for ko in $(cat /mods/order); do insmod /mods/$ko || echo "@@ insmod $ko FAILED"; done
# Network: lo + the virtio NIC with the address qemu's (restricted, guest-only)
# user-mode net would hand out by DHCP, set statically.  rxe also accepts lo
# (GID ::ffff:127.0.0.1), but a real netdev is the usual RoCE setup.
ip link set lo up
# With several NICs (--nics), NIC i gets 10.0.(2+i).15.
NICS=$(ls /sys/class/net | grep -v '^lo$')
i=0
for ETH in $NICS; do ip link set "$ETH" up; ip addr add "10.0.$((2 + i)).15/24" dev "$ETH"; i=$((i + 1)); done
# The host's root, read-only, becomes the root of the command.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /host || echo "@@ 9p root mount FAILED"
mount -t proc proc /host/proc; mount -t sysfs sys /host/sys; mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/pts /host/dev/shm; mount -t devpts pts /host/dev/pts; mount -t tmpfs shm /host/dev/shm
mount -t tmpfs tmp /host/tmp; mount -t tmpfs run /host/run; mount -t tmpfs vtmp /host/var/tmp
i=0
[ -s /shares ] && while read -r SP; do
    mkdir -p "/host$SP" 2>/dev/null     # only possible under a tmpfs (e.g. /tmp)
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 "share$i" "/host$SP" || echo "@@ share mount $SP FAILED"
    i=$((i + 1))
done < /shares
cp /cmd.sh /env.sh /host/tmp/
echo "@@ guest ready at $(cut -d' ' -f1 /proc/uptime)s uptime"
# Soft-RoCE device on each NIC (rxe0 on the first), then the command, in the
# host-root chroot.
RXE_NETDEVS=${NICS:-lo} chroot /host /bin/sh -c '
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
  ulimit -l unlimited
  i=0
  for n in $RXE_NETDEVS; do
    rdma link add "rxe$i" type rxe netdev "$n" || echo "@@ rdma link add rxe$i FAILED"
    i=$((i + 1))
  done
  . /tmp/env.sh
  cd "$RXE_CWD" 2>/dev/null || cd /tmp
  /bin/sh /tmp/cmd.sh'
echo "@@RXE_GUEST_RC=$?"
sync
poweroff -f        # reboot(RB_POWER_OFF): qemu (-no-reboot) exits by itself
EOF
    chmod +x initramfs/init
    (cd initramfs && find . | sort | cpio -o -H newc --quiet -R 0:0 | gzip -1) > initramfs.cpio.gz
fi
if [ $SETUP_ONLY = 1 ]; then log "ready: $(cat kernel/.pkg | tr '\n' ' ') $BOOTK $RXE_DIR/initramfs.cpio.gz"; exit 0; fi

# ------------------------------------------------ 4. per-run command archive
# A second newc archive appended to the initrd (the kernel unpacks all
# concatenated archives) carries the command, env and share list.
RUN=$(mktemp -d "$RXE_DIR/run.XXXXXX")
trap 'rm -rf "$RUN"' EXIT
mkdir -p "$RUN/arc"
if [ $# -eq 1 ]; then
    printf '%s\n' "$1" > "$RUN/arc/cmd.sh"
elif [ $# -gt 1 ]; then
    printf '%q ' "$@" > "$RUN/arc/cmd.sh"; echo >> "$RUN/arc/cmd.sh"
else
    cat > "$RUN/arc/cmd.sh" <<'EOF'
# built-in smoke test
set -x
rdma link show
ibv_devices
ibv_devinfo -v -d rxe0 | grep -E 'hca_id|transport|state|link_layer|GID\[|active_mtu'
IP=$(ip -4 -o addr show | awk '$2!="lo"{sub("/.*","",$4); print $4; exit}')
# GID index 1 = RoCE v2, IPv4-mapped address of the NIC (0 = IPv6 link-local)
timeout 60 ibv_rc_pingpong -d rxe0 -g 1 & sleep 1
ibv_rc_pingpong -d rxe0 -g 1 "$IP"; rc1=$?; wait
timeout 60 ibv_rc_pingpong -d rxe0 -g 1 -n 10000 & sleep 1
ibv_rc_pingpong -d rxe0 -g 1 -n 10000 "$IP"; rc2=$?; wait
timeout 60 ibv_rc_pingpong -d rxe0 -g 1 -n 2000 -s 65536 & sleep 1
ibv_rc_pingpong -d rxe0 -g 1 -n 2000 -s 65536 "$IP"; rc3=$?; wait
exit $((rc1 + rc2 + rc3))
EOF
fi
{   printf 'export RXE_CWD=%q\n' "$CALLER_PWD"
    for v in $(compgen -e); do
        case "$v" in CARGO_*|RUST_*) ;; *) [[ " ${RXE_PASS_ENV:-} " == *" $v "* ]] || continue;; esac
        printf 'export %s=%q\n' "$v" "${!v}"
    done; } > "$RUN/arc/env.sh"
: > "$RUN/arc/shares"
VIRTFS=()
for i in "${!SHARES[@]}"; do
    printf '%s\n' "${SHARES[$i]}" >> "$RUN/arc/shares"
    VIRTFS+=(-virtfs "local,path=${SHARES[$i]},mount_tag=share$i,security_model=none,multidevs=remap")
done
(cd "$RUN/arc" && find . | cpio -o -H newc --quiet -R 0:0 | gzip -1) > "$RUN/cmd.cpio.gz"
cat initramfs.cpio.gz "$RUN/cmd.cpio.gz" > "$RUN/initrd.img"

# ----------------------------------------------------------------- 5. boot
# Accelerator note: on a host whose /dev/kvm is PVM (kvm_pvm module, nested
# without vmx/svm in /proc/cpuinfo, e.g. some cloud VMs) KVM_CREATE_VM
# works but only PVM-enabled guest kernels run; the stock Debian kernel hangs
# forever at 100% sys time ("Probing EDD" is the last line with the bzImage,
# nothing at all with PVH).  So "auto" picks TCG there (multi-threaded).
if [ "$ACCEL" = auto ]; then
    if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo && [ ! -d /sys/module/kvm_pvm ]; then ACCEL=kvm; else ACCEL=tcg; fi
fi
if [ "$ACCEL" = kvm ]; then ACC=(-machine pc,accel=kvm -cpu host)
else ACC=(-machine pc -accel tcg,thread=multi,tb-size=256 -cpu max); fi
# NIC i: its own guest-only user-mode net, 10.0.(2+i).0/24 (the first is
# qemu's default).
NIC_ARGS=(-nic user,model=virtio-net-pci,restrict=on)
for ((i = 1; i < NICS; i++)); do
    NIC_ARGS+=(-nic "user,model=virtio-net-pci,restrict=on,net=10.0.$((2 + i)).0/24")
done
QEMU=(qemu-system-x86_64 "${ACC[@]}" -smp "$SMP" -m "$MEM"
      -nodefaults -no-user-config -display none -serial stdio -no-reboot
      -kernel "$BOOTK" -initrd "$RUN/initrd.img"
      -append "console=ttyS0 ${RXE_KLOG:-quiet loglevel=3} no_timer_check panic=-1 rdinit=/init"
      -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
      "${NIC_ARGS[@]}"
      "${VIRTFS[@]}")
log "booting $KVER ($ACCEL, ${MEM} MiB, ${SMP} vCPU, timeout ${TMO}s)"
t0=$(date +%s.%N)
set +e
timeout "$TMO" "${QEMU[@]}" < /dev/null | sed -u 's/\r$//' | tee "$RUN/console.log"
qrc=${PIPESTATUS[0]}
set -e
log "qemu exited rc=$qrc after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b - a}')s"
cp "$RUN/console.log" "$RXE_DIR/last-console.log"
rc=$(sed -n 's/^@@RXE_GUEST_RC=\([0-9]*\).*/\1/p' "$RUN/console.log" | tail -1)
if [ -z "$rc" ]; then log "no exit status from the guest; see $RXE_DIR/last-console.log"; exit 125; fi
exit "$rc"
