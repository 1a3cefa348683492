#!/usr/bin/env bash
# Test hosts for the deploy roles: five Debian containers booted with
# systemd-nspawn (two storage hosts, two load hosts, a monitoring host), each
# with its own network namespace and address on a private bridge that only
# they and this machine reach, sshd with a key made here, and one
# software-device fabric directory bind-mounted into all of them (the stand-in
# for the RDMA network).
#
#   hosts.sh up     build the image (once), boot the hosts, write the inventory
#   hosts.sh reset HOST...  reset the named hosts at once, the hard way, and
#                   boot them again (their files stay)
#   hosts.sh down   power them off and remove them
#
# Needs root, systemd-container, mmdebstrap and iproute2. State lives in
# $KVS_DEPLOY_STATE (default /var/tmp/kvs-deploy-test); the image stays there
# between runs. KVS_DEPLOY_BRIDGE, KVS_DEPLOY_NET (the first three octets)
# and KVS_DEPLOY_FABRIC name the bridge, network and fabric.
set -euo pipefail

STATE=${KVS_DEPLOY_STATE:-/var/tmp/kvs-deploy-test}
# Another bridge, /24 and fabric let two runs go on at once.
BRIDGE=${KVS_DEPLOY_BRIDGE:-kvsdeploy0}
NET=${KVS_DEPLOY_NET:-10.77.0}
FABRIC=${KVS_DEPLOY_FABRIC:-deploytest}
FABRIC_DIR=/dev/shm/mlx5sim-$FABRIC
# The uid the servers and the drivers run as: one fabric belongs to one uid.
SERVICE_UID=990
HOSTS=("kvs1:11" "kvs2:12" "load1:21" "load2:22" "mon1:31")
MIRROR=${KVS_DEPLOY_MIRROR:-http://deb.debian.org/debian}
# The hosts have no route out: what the roles install must be in the image
# (Open MPI for ycsb, Prometheus for monitoring), so that apt finds it there.
PACKAGES=systemd,systemd-sysv,dbus,python3,python3-apt,openssh-server,iproute2,openmpi-bin,prometheus

say() { printf '[hosts] %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

image() {
  local img=$STATE/image
  # Built again when the package list changed.
  if [ -f "$img/etc/os-release" ] && [ "$(cat "$STATE/image.packages" 2>/dev/null)" = "$PACKAGES" ]; then return; fi
  say "building the Debian bookworm image (mmdebstrap, about a minute)"
  rm -rf "$img" "$img.tmp"
  mmdebstrap --variant=minbase --include="$PACKAGES" bookworm "$img.tmp" "$MIRROR" \
    </dev/null >"$STATE/mmdebstrap.log" 2>&1 ||
    { tail -20 "$STATE/mmdebstrap.log" >&2; die "mmdebstrap failed (log: $STATE/mmdebstrap.log)"; }
  # Host keys are made per host below.
  rm -f "$img.tmp"/etc/ssh/ssh_host_*
  # Prometheus runs only where the monitoring role enables it.
  rm -f "$img.tmp"/etc/systemd/system/multi-user.target.wants/prometheus.service
  mv "$img.tmp" "$img"
  echo "$PACKAGES" >"$STATE/image.packages"
}

bridge() {
  ip link show "$BRIDGE" >/dev/null 2>&1 && return
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

# A host's root: an overlay whose lower layer is the image, so five hosts
# cost the image once plus what each writes (a copy each took 3 GB, and once
# filled CI's disk). Where overlayfs cannot be mounted, a copy.
host_root() {
  local name=$1 ip=$2 root=$STATE/hosts/$1 layer=$STATE/layers/$1
  unmount_root "$root"
  rm -rf "$root" "$layer"
  mkdir -p "$root" "$layer/upper" "$layer/work"
  if ! mount -t overlay "kvs-deploy-$name" \
    -o "lowerdir=$STATE/image,upperdir=$layer/upper,workdir=$layer/work" "$root" 2>/dev/null; then
    say "$name: overlayfs could not be mounted; copying the image ($(du -sh "$STATE/image" | cut -f1))"
    rmdir "$root"
    cp -a --reflink=auto "$STATE/image" "$root"
  fi
  echo "$name" >"$root/etc/hostname"
  {
    echo "127.0.0.1 localhost"
    for h in "${HOSTS[@]}"; do echo "$NET.${h#*:} ${h%%:*}"; done
  } >"$root/etc/hosts"
  mkdir -p "$root/etc/systemd/network"
  printf '[Match]\nName=host0\n\n[Network]\nAddress=%s/24\nLinkLocalAddressing=no\n' "$ip" \
    >"$root/etc/systemd/network/50-host0.network"
  ln -sf /lib/systemd/system/systemd-networkd.service \
    "$root/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
  mkdir -p "$root/etc/systemd/system/sockets.target.wants"
  ln -sf /lib/systemd/system/systemd-networkd.socket \
    "$root/etc/systemd/system/sockets.target.wants/systemd-networkd.socket"
  install -d -m 700 "$root/root/.ssh"
  install -m 600 "$STATE/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
  ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$root/etc/ssh/ssh_host_ed25519_key"
  echo "$ip ssh-ed25519 $(cut -d' ' -f2 "$root/etc/ssh/ssh_host_ed25519_key.pub")" >>"$STATE/known_hosts"
}

boot() {
  local name=$1 root=$STATE/hosts/$1
  SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 setsid systemd-nspawn --register=no --keep-unit --machine="$name" -D "$root" \
    --network-bridge="$BRIDGE" --bind="$FABRIC_DIR" --console=passive -b \
    </dev/null >"$STATE/$name.console" 2>&1 &
  echo $! >"$STATE/$name.pid"
}

wait_ssh() {
  local name=$1 ip=$2 retries=3
  for _ in $(seq 120); do
    # Booted: systemd is done starting units. On a loaded machine a unit
    # sometimes fails at boot (seen: systemd-user-sessions, which leaves
    # /run/nologin and so keeps every user but root out): start the failed
    # units again, a few times, before giving up.
    local st failed
    st=$(ssh -F "$STATE/ssh_config" -o ConnectTimeout=2 "$ip" systemctl is-system-running --wait 2>/dev/null || true)
    case "$st" in
      running) return ;;
      degraded)
        failed=$(ssh -F "$STATE/ssh_config" "$ip" systemctl --failed --no-legend --plain | cut -d' ' -f1 | tr '\n' ' ')
        [ "$retries" -gt 0 ] || die "$name: units failed at boot and again when restarted: $failed"
        say "$name: failed at boot: $failed; starting them again"
        retries=$((retries - 1))
        ssh -F "$STATE/ssh_config" "$ip" "systemctl reset-failed && systemctl restart $failed" || true
        continue
        ;;
    esac
    kill -0 "$(cat "$STATE/$name.pid")" 2>/dev/null ||
      { tail -20 "$STATE/$name.console" >&2; die "$name's container exited (console: $STATE/$name.console)"; }
    sleep 1
  done
  tail -20 "$STATE/$name.console" >&2
  die "$name ($ip) did not come up with sshd in 120 s"
}

inventory() {
  rm -rf "$STATE/inventory"
  mkdir -p "$STATE/inventory/group_vars"
  cat >"$STATE/inventory/hosts.yml" <<YAML
---
all:
  vars:
    ansible_user: root
    ansible_ssh_common_args: -F $STATE/ssh_config
  children:
    storage:
      hosts:
        kvs1: {ansible_host: $NET.11, kvs_server_zone: kvs1}
        kvs2: {ansible_host: $NET.12, kvs_server_zone: kvs2}
    load:
      hosts:
        load1: {ansible_host: $NET.21}
        load2: {ansible_host: $NET.22}
    monitoring:
      hosts:
        mon1: {ansible_host: $NET.31}
YAML
  cat >"$STATE/inventory/group_vars/all.yml" <<YAML
---
# No NIC here: every process runs on the software device, in one fabric
# shared by the containers, as one uid.
kvs_auth_token: "deploy-test-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
kvs_server_auth_token: "{{ kvs_auth_token }}"
ycsb_auth_token: "{{ kvs_auth_token }}"
kvs_cluster_token: "deploy-test-cluster-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
kvs_server_cluster_token: "{{ kvs_cluster_token }}"
kvs_server_software_device: true
kvs_server_fabric: $FABRIC
kvs_server_uid: $SERVICE_UID
kvs_server_workers: 1
kvs_server_max_memory: 256M
# The records on disk, each write answered once its log is flushed: a
# server killed, or a host reset, reloads them before it serves (the test's
# "restart all" step kills every storage host's server at once).
kvs_server_durability: always
# Two copies of each slot, one on each storage host (each its own zone): a
# restarted host hands its slots to the other first and gets its copies back.
kvs_server_replicas: 2
ycsb_software_device: true
ycsb_fabric: $FABRIC
ycsb_uid: $SERVICE_UID
# Two driver ranks on each load host: mpirun on load1 starts load2's over
# ssh, and the report is merged from all four.
ycsb_ranks_per_host: 2
# Prometheus scrapes and evaluates the alert rules every 5 s (the test waits
# for an alert to fire).
monitoring_scrape_interval: 5s
YAML
}

up() {
  [ "$(id -u)" = 0 ] || die "needs root (systemd-nspawn, a bridge)"
  for c in systemd-nspawn mmdebstrap ip ssh ssh-keygen; do
    command -v "$c" >/dev/null || die "$c is missing (apt-get install systemd-container mmdebstrap iproute2 openssh-client)"
  done
  mkdir -p "$STATE/hosts"
  image
  down_hosts
  rm -f "$STATE/known_hosts" "$STATE/id_ed25519" "$STATE/id_ed25519.pub"
  ssh-keygen -q -t ed25519 -N '' -C kvs-deploy-test -f "$STATE/id_ed25519"
  # How this machine (ansible, the test) reaches the hosts: as root, with the
  # key made here, trusting only the host keys made for them.
  printf 'Host *\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n  BatchMode yes\n  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n' \
    "$STATE/id_ed25519" "$STATE/known_hosts" >"$STATE/ssh_config"
  rm -rf "$FABRIC_DIR"
  install -d -m 700 -o "$SERVICE_UID" -g "$SERVICE_UID" "$FABRIC_DIR"
  bridge
  for h in "${HOSTS[@]}"; do host_root "${h%%:*}" "$NET.${h#*:}"; done
  for h in "${HOSTS[@]}"; do boot "${h%%:*}"; done
  for h in "${HOSTS[@]}"; do wait_ssh "${h%%:*}" "$NET.${h#*:}"; done
  inventory
  say "up: ${HOSTS[*]} on $BRIDGE ($NET.0/24); inventory $STATE/inventory"
}

# Resets the named hosts at the same moment, the hard way: reboot(2) from
# inside each, with no shutdown and no sync, kills every process of the host
# at once (a power cut, but for the page cache: the containers share this
# machine's kernel). systemd-nspawn exits then (a reboot under --keep-unit),
# and each host is booted again from its directory and waited for.
reset() {
  [ "$#" -gt 0 ] || die "usage: $0 reset HOST..."
  local name pid sshs=()
  local -A addr
  for name in "$@"; do
    addr[$name]=$(host_ip "$name")
    if ! [ -f "$STATE/$name.pid" ] || ! kill -0 "$(cat "$STATE/$name.pid")" 2>/dev/null; then
      die "$name is not up"
    fi
  done
  for name in "$@"; do
    # The connection dies with the host: it may end in an error.
    timeout 20 ssh -F "$STATE/ssh_config" "${addr[$name]}" 'reboot --force --force --no-sync' >/dev/null 2>&1 &
    sshs+=($!)
  done
  wait "${sshs[@]}" || true
  for name in "$@"; do
    pid=$(cat "$STATE/$name.pid")
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    ! kill -0 "$pid" 2>/dev/null || die "$name did not go down within 30 s of its reset"
    rm -f "$STATE/$name.pid"
  done
  for name in "$@"; do boot "$name"; done
  for name in "$@"; do wait_ssh "$name" "${addr[$name]}"; done
  say "reset and booted again: $*"
}

# The address of host $1.
host_ip() {
  local h
  for h in "${HOSTS[@]}"; do
    [ "${h%%:*}" != "$1" ] || { echo "$NET.${h#*:}"; return; }
  done
  die "no host $1 (the hosts: ${HOSTS[*]})"
}

down_hosts() {
  local pids=() names=() i
  for h in "${HOSTS[@]}"; do
    local f=$STATE/${h%%:*}.pid
    [ -f "$f" ] || continue
    local pid
    pid=$(cat "$f")
    # SIGTERM asks the container's systemd to power off.
    kill -TERM "$pid" 2>/dev/null && { pids+=("$pid"); names+=("${h%%:*}"); }
    rm -f "$f"
  done
  for i in "${!pids[@]}"; do
    local pid=${pids[$i]}
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null || continue
    # Not powered off in 30 s (seen on a busy machine): kill the container's
    # init, systemd-nspawn's child, which ends every process of the container,
    # and let systemd-nspawn exit and remove its veth. Killing systemd-nspawn
    # alone would leave the container running, and its veth would stop the
    # next boot of that host ("Failed to add new veth interfaces").
    say "${names[$i]} did not power off within 30 s: killing it"
    pkill -KILL -P "$pid" 2>/dev/null || true
    for _ in $(seq 10); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
}

# Unmounts host root $1 if it is an overlay (a lazy unmount should a process
# of a killed container still hold it).
unmount_root() {
  mountpoint -q "$1" 2>/dev/null || return 0
  umount "$1" 2>/dev/null || umount -l "$1"
}

down() {
  down_hosts
  ip link del "$BRIDGE" 2>/dev/null || true
  local root
  for root in "$STATE"/hosts/*; do unmount_root "$root"; done
  rm -rf "$STATE/hosts" "$STATE/layers" "$FABRIC_DIR"
  say "down"
}

case "${1:-}" in
  up) up ;;
  reset) shift; reset "$@" ;;
  down) down ;;
  *) echo "usage: $0 up|reset HOST...|down" >&2; exit 2 ;;
esac
