#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/rdma/guest-init.sh -- process 1 of the guest, after the initramfs (copied into
# each run's job folder, /hoop-vm, by tests/rdma/vm.sh). Mounts the shares listed in
# /hoop-vm/mounts at their host paths, creates two Soft-RoCE devices over a veth pair,
# writes what it made to /etc/hoop-rdma.env, runs /hoop-vm/cmd.sh with its output in
# /hoop-vm/out.log and its exit status in /hoop-vm/rc, and powers off.
#
# Network: veth0 = 10.77.0.1/24 under rxe0, veth1 = 10.77.0.2/24 under rxe1. Two local
# addresses normally reach each other through lo, where Soft-RoCE drops the packets;
# policy routing sends locally made packets between the two addresses out of the
# veth instead (rules before the local table, matching iif lo), and accept_local=1 /
# rp_filter=0 let the other end take a packet whose source is one of its own
# addresses. Permanent neighbour entries spare the ARP exchange.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C
job=/hoop-vm
: > "$job/booted"
off() {
    sync
    echo o > /proc/sysrq-trigger
    sleep 60 2> /dev/null
}
fail() {
    echo "$*" > "$job/setup-failed"
    { echo "guest-init: $*"; dmesg | tail -n 8; } > /dev/console
    off
}
t0=$(date +%s.%N)
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /dev/shm /dev/pts
ln -sf /proc/self/fd /dev/fd # devtmpfs has no /dev/fd (udev makes it): <(...) needs it
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t tmpfs tmpfs /dev/shm
mount -t devpts devpts /dev/pts
hostname hoop-guest
while read -r tag path mode; do
    opts=trans=virtio,version=9p2000.L,msize=262144
    [ "$mode" = ro ] && opts=$opts,ro,cache=loose
    mkdir -p "$path" && mount -t 9p -o "$opts" "$tag" "$path" || fail "cannot mount $path (9p tag $tag)"
done < <(sort -k2,2 "$job/mounts") # a folder before the folders inside it

a0=10.77.0.1 a1=10.77.0.2
ip link set lo up
modprobe crc32_generic && modprobe rdma_rxe || fail "modprobe rdma_rxe failed"
modprobe veth || fail "modprobe veth failed"
ip link add veth0 type veth peer name veth1 || fail "cannot create the veth pair"
for f in all default veth0 veth1; do
    echo 1 > "/proc/sys/net/ipv4/conf/$f/accept_local"
    echo 0 > "/proc/sys/net/ipv4/conf/$f/rp_filter"
done
ip addr add $a0/24 dev veth0 && ip addr add $a1/24 dev veth1 &&
    ip link set veth0 up && ip link set veth1 up || fail "cannot configure veth0/veth1"
ip rule add pref 100 lookup local && ip rule del pref 0 lookup local &&
    ip route add $a1 dev veth0 src $a0 table 10 &&
    ip rule add pref 10 iif lo from $a0 to $a1 lookup 10 &&
    ip route add $a0 dev veth1 src $a1 table 11 &&
    ip rule add pref 11 iif lo from $a1 to $a0 lookup 11 || fail "cannot set up the policy routing"
ip neigh replace $a1 lladdr "$(cat /sys/class/net/veth1/address)" dev veth0 nud permanent
ip neigh replace $a0 lladdr "$(cat /sys/class/net/veth0/address)" dev veth1 nud permanent
rdma link add rxe0 type rxe netdev veth0 || fail "rdma link add rxe0 failed"
rdma link add rxe1 type rxe netdev veth1 || fail "rdma link add rxe1 failed"

# The GID index of each device's IPv4 address as RoCE v2 (::ffff:a.b.c.d); only the
# first entries are read (each sysfs read is slow under emulation).
gid_index() { # DEV ADDR
    local want i gid
    want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${2//./ })
    for i in 0 1 2 3 4 5 6 7; do
        gid=$(cat "/sys/class/infiniband/$1/ports/1/gids/$i" 2> /dev/null) || continue
        [ "$gid" = "$want" ] &&
            [ "$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/$i" 2> /dev/null)" = "RoCE v2" ] &&
            { echo "$i"; return 0; }
    done
    return 1
}
for _ in $(seq 50); do
    g0=$(gid_index rxe0 $a0) && g1=$(gid_index rxe1 $a1) && break
    sleep 0.1
done
[ -n "${g0:-}" ] && [ -n "${g1:-}" ] || fail "no IPv4 RoCE v2 GID on rxe0/rxe1 after 5 s"
cat > /etc/hoop-rdma.env << ENV
export RDMA_GUEST=1
export RDMA_DEVS="rxe0 rxe1"
export RDMA_DEV0=rxe0 RDMA_DEV1=rxe1
export RDMA_NETDEV0=veth0 RDMA_NETDEV1=veth1
export RDMA_ADDR0=$a0 RDMA_ADDR1=$a1
export RDMA_GID0=$g0 RDMA_GID1=$g1
ENV
awk -v t0="$t0" -v t1="$(date +%s.%N)" -v up="$(cut -d' ' -f1 /proc/uptime)" \
    'BEGIN { printf "guest-init: rxe0, rxe1 ready %.1f s after boot (set-up %.1f s)\n", up, t1 - t0 }' \
    > /dev/console

ulimit -l unlimited
(
    . /etc/hoop-rdma.env
    . "$job/cmd.sh"
) > "$job/out.log" 2>&1 < /dev/null
echo $? > "$job/rc.tmp"
mv "$job/rc.tmp" "$job/rc"
off
