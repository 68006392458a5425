#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/rdma/vm.sh -- run one command inside a qemu guest that has two Soft-RoCE
# devices (rxe0 on veth0, rxe1 on veth1), with the build tree shared in.
#
#   tests/rdma/vm.sh [--timeout S] [--share DIR]... [--env NAME=VALUE]... -- COMMAND...
#   tests/rdma/vm.sh --build      build (or check) the cached guest and exit
#
# The guest is made of Debian packages only, built once and cached under
# $HOOP_RDMA_CACHE (default ~/.cache/hoop-rdma), in a folder named after the kernel:
# the stock kernel (linux-image-6.1.0-NN-amd64, the one linux-image-amd64 points at;
# HOOP_RDMA_KERNEL=6.1.0-NN-amd64 picks another), its uncompressed vmlinux, an
# mmdebstrap (minbase) bookworm root filesystem with rdma-core, perftest and the
# libraries hoop's programs link, and a busybox initramfs. Building needs root, the
# Debian mirror (HOOP_RDMA_MIRROR: another) and about 300 MB of disk.
#
# The guest runs under TCG (software emulation: slow, but it boots Debian's kernel
# where /dev/kvm cannot), mounts the root filesystem read-only over 9p with a RAM
# overlay, creates the rxe devices, then runs COMMAND in the current directory. The
# source tree (this script's ../..), the current directory, every --share DIR and the
# CUDA library folders (/usr/local/cuda*/lib64) and /usr/share/datasets (both
# read-only) appear in the guest at
# the same absolute paths, so libtool wrappers and rpaths work; what the command
# writes there lands on the host. COMMAND sees RDMA_DEV0/1 (rxe0, rxe1),
# RDMA_GID0/1 (their IPv4 RoCE v2 GID index), RDMA_ADDR0/1 (the veth
# addresses), RDMA_NETDEV0/1 and RDMA_GUEST=1, also written to
# /etc/hoop-rdma.env; every HOOP_* variable of the caller is passed in as well.
#
# Exit: COMMAND's exit status; 124 when the guest did not finish within --timeout
# (default 600 s, boot included; the guest is killed); 77 when the guest cannot be
# built or run here (no qemu, not Debian, no root to build, no mirror), with one line
# saying why; 1 when the guest failed to boot or to set up its devices (the end of its
# console follows). HOOP_RDMA_KEEP=1 keeps the run's folder (console.log, out.log).
set -euo pipefail

me=vm.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/../.." && pwd)
cache=${HOOP_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hoop-rdma}
timeout_s=600
build_only=0
shares=()
envs=()

skip() {
    echo "$me: SKIP: $*" >&2
    exit 77
}
die() {
    echo "$me: $*" >&2
    exit 1
}
usage() {
    awk 'NR > 2 && !/^#/ { exit } NR > 2 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
    exit "${1:-0}"
}

while [ $# -gt 0 ]; do
    case $1 in
    --timeout)
        [[ ${2-} =~ ^[1-9][0-9]*$ ]] || { echo "$me: --timeout needs seconds > 0, not '${2-}'" >&2; exit 2; }
        timeout_s=$2
        shift 2
        ;;
    --share)
        [ -d "${2-}" ] || { echo "$me: --share: '${2-}' is not a directory" >&2; exit 2; }
        shares+=("$(cd "$2" && pwd -P)")
        shift 2
        ;;
    --env)
        [[ ${2-} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "$me: --env needs NAME=VALUE, not '${2-}'" >&2; exit 2; }
        envs+=("$2")
        shift 2
        ;;
    --build) build_only=1; shift ;;
    -h | --help) usage 0 ;;
    --) shift; break ;;
    *) echo "$me: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ "$build_only" = 1 ] || [ $# -gt 0 ] || { echo "$me: no command given (usage: $me [--timeout S] -- COMMAND...)" >&2; exit 2; }

# ---------------------------------------------------------------- can it run here?
qemu=$(command -v qemu-system-x86_64 || true)
[ -n "$qemu" ] || skip "qemu-system-x86_64 is not installed (Debian: qemu-system-x86)"
"$qemu" -version > /dev/null 2>&1 || skip "qemu-system-x86_64 does not start: $("$qemu" -version 2>&1 | head -1)"

# The kernel: HOOP_RDMA_KERNEL, else the one Debian's linux-image-amd64 depends on,
# else the newest one already cached.
kver=${HOOP_RDMA_KERNEL:-}
if [ -z "$kver" ] && command -v apt-cache > /dev/null; then
    kver=$(apt-cache depends linux-image-amd64 2> /dev/null |
        sed -n 's/^ *Depends: linux-image-\(6\.1\.0-[0-9]*-amd64\)$/\1/p' | head -1)
fi
if [ -z "$kver" ]; then
    kver=$(find "$cache" -mindepth 2 -maxdepth 2 -name stamp 2> /dev/null |
        sed 's|.*/\([^/]*\)/stamp$|\1|' | sort -V | tail -1)
fi
[ -n "$kver" ] || skip "no Debian 12 kernel package known to apt (linux-image-amd64) and no cached guest in $cache"
[[ $kver =~ ^[0-9][A-Za-z0-9.+-]*$ ]] || { echo "$me: HOOP_RDMA_KERNEL='$kver' is not a kernel version like 6.1.0-57-amd64" >&2; exit 2; }
guest=$cache/$kver

# What the root filesystem holds: the verbs stack and its tools, the runtime libraries
# of hoop's programs (ldd of tools/ bench/ tests/ on Debian 12: OpenBLAS and gfortran,
# zlib, hwloc and udev, libstdc++ (CUDA), subunit (Check)), and the initramfs's busybox.
pkgs="rdma-core ibverbs-providers ibverbs-utils libibverbs1 librdmacm1 rdmacm-utils perftest
iproute2 kmod procps psmisc gzip libopenblas0-pthread libgfortran5 libquadmath0 zlib1g
libhwloc15 libudev1 libstdc++6 libsubunit0 busybox-static"
# Modules the initramfs loads (the rest come from the root filesystem's modprobe).
boot_mods="virtio_pci 9pnet_virtio 9p overlay"
guest_mods="rdma_rxe crc32_generic veth ib_uverbs rdma_ucm ib_umad"
recipe=$(printf '%s\n' "$kver" "$pkgs" "$boot_mods" "$guest_mods" "recipe 1" | cksum | cut -d' ' -f1)
recipe="$recipe $(cksum < "$here/initramfs-init" | cut -d' ' -f1)"

# ---------------------------------------------------------------- building the guest
# Prints the modules NAME needs (recursively, dependencies first), from the .modinfo
# of the files under $1 (no kmod needed on the host).
mod_closure() {
    local root=$1 m dep path
    shift
    for m in "$@"; do
        m=${m//-/_}
        case " $seen " in *" $m "*) continue ;; esac
        seen="$seen $m"
        path=${modpath[$m]:-}
        [ -n "$path" ] || die "kernel $kver has no module $m"
        for dep in $(tr '\0' '\n' < "$root/$path" | sed -n 's/^depends=//p' | tr ',' ' '); do
            mod_closure "$root" "$dep"
        done
        echo "$path"
    done
}

build_guest() {
    local tmp k vmlinuz off
    command -v apt-get > /dev/null || skip "apt-get not found: the guest is built from Debian packages"
    command -v mmdebstrap > /dev/null || skip "mmdebstrap is not installed (Debian: mmdebstrap)"
    [ "$(id -u)" = 0 ] ||
        skip "building the guest (mmdebstrap) needs root: run 'sudo HOOP_RDMA_CACHE=$cache $0 --build' once"
    echo "$me: building the guest for kernel $kver in $guest (once; about a minute)" >&2
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/.build.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    chmod 755 "$tmp"

    # The kernel: vmlinux (ELF, booted by qboot through its PVH note) decompressed from
    # the bzImage's xz payload; the bzImage itself when that fails.
    (cd "$tmp" && apt-get download "linux-image-$kver" > "$tmp/download.log" 2>&1) ||
        skip "cannot download linux-image-$kver: $(grep -v '^W:' "$tmp/download.log" | tail -1)"
    dpkg-deb -x "$tmp"/linux-image-*.deb "$tmp/k"
    vmlinuz=$tmp/k/boot/vmlinuz-$kver
    [ -f "$vmlinuz" ] || die "the kernel package has no boot/vmlinuz-$kver"
    off=$(LC_ALL=C grep -aboP '\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1 || true)
    if [ -n "$off" ]; then
        tail -c +$((off + 1)) "$vmlinuz" | xz -dcq > "$tmp/vmlinux" 2> /dev/null || true
    fi
    if [ "$(head -c 4 "$tmp/vmlinux" 2> /dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; then
        echo vmlinux > "$tmp/kernel"
    else
        rm -f "$tmp/vmlinux"
        cp "$vmlinuz" "$tmp/bzImage"
        echo bzImage > "$tmp/kernel"
    fi

    # The root filesystem, without documentation, man pages and translations.
    mmdebstrap --variant=minbase --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --include="$(echo $pkgs | tr ' ' ',')" bookworm "$tmp/rootfs" ${HOOP_RDMA_MIRROR:-} \
        > "$tmp/mmdebstrap.log" 2>&1 || {
        tail -5 "$tmp/mmdebstrap.log" >&2
        if grep -q -i -E 'could not resolve|failed to fetch|temporary failure|unable to connect' "$tmp/mmdebstrap.log"; then
            skip "mmdebstrap cannot reach the Debian mirror"
        fi
        die "mmdebstrap failed (log above)"
    }
    printf '127.0.0.1 localhost hoop-guest\n' > "$tmp/rootfs/etc/hosts"
    echo hoop-guest > "$tmp/rootfs/etc/hostname"

    # The modules: the guest's (with their dependencies) into the root filesystem,
    # indexed by its own depmod; the boot ones into the initramfs, in load order.
    local kmods=lib/modules/$kver f
    declare -gA modpath=()
    while read -r f; do
        k=${f##*/}
        modpath[${k%.ko}]=${f#"$tmp/k/"}
        k=${k%.ko}
        modpath[${k//-/_}]=${f#"$tmp/k/"}
    done < <(find "$tmp/k/$kmods/kernel" -name '*.ko')
    seen=""
    # shellcheck disable=SC2086
    for f in $(mod_closure "$tmp/k" $boot_mods $guest_mods); do
        mkdir -p "$tmp/rootfs/$(dirname "$f")"
        cp "$tmp/k/$f" "$tmp/rootfs/$f"
    done
    cp "$tmp/k/$kmods"/modules.{order,builtin,builtin.modinfo} "$tmp/rootfs/$kmods/"
    chroot "$tmp/rootfs" /sbin/depmod "$kver"

    # The initramfs: the root filesystem's static busybox (which also writes the cpio
    # archive, so the host needs neither busybox nor cpio).
    local ird=$tmp/initramfs bb=$tmp/rootfs/bin/busybox
    [ -x "$bb" ] || die "the root filesystem has no /bin/busybox (busybox-static)"
    mkdir -p "$ird"/{bin,dev,proc,sys,mnt/root,mnt/rw,newroot,mod}
    cp "$bb" "$ird/bin/busybox"
    ln -s busybox "$ird/bin/sh"
    cp "$here/initramfs-init" "$ird/init"
    chmod 755 "$ird/init"
    seen=""
    # shellcheck disable=SC2086
    for f in $(mod_closure "$tmp/k" $boot_mods); do
        cp "$tmp/k/$f" "$ird/mod/"
        echo "${f##*/}" >> "$ird/mod/order"
    done
    (cd "$ird" && find . | "$bb" cpio -o -H newc 2> /dev/null | gzip -1) > "$tmp/initrd.gz"
    rm -rf "$ird" "$tmp/k" "$tmp"/*.deb

    echo "$recipe" > "$tmp/stamp"
    rm -rf "$guest"
    mv "$tmp" "$guest"
    trap - EXIT
    # Guests of older kernels are not used again.
    find "$cache" -mindepth 1 -maxdepth 1 -type d -name '6.*' ! -name "$kver" -exec rm -rf {} +
    echo "$me: guest ready in $guest ($(du -sh "$guest" | cut -f1))" >&2
}

if [ "$(cat "$guest/stamp" 2> /dev/null)" != "$recipe" ]; then
    mkdir -p "$cache" 2> /dev/null || skip "cannot create the cache folder $cache"
    exec 9> "$cache/.lock"
    flock 9 # one builder at a time; the others wait and find it built
    [ "$(cat "$guest/stamp" 2> /dev/null)" = "$recipe" ] || build_guest
    flock -u 9
fi
[ "$build_only" = 0 ] || exit 0

# ---------------------------------------------------------------- one run
job=$(mktemp -d "${TMPDIR:-/tmp}/hoop-vm.XXXXXX")
qpid=""
cleanup() {
    [ -z "$qpid" ] || kill "$qpid" 2> /dev/null || true
    if [ -n "${HOOP_RDMA_KEEP:-}" ]; then
        echo "$me: job folder kept: $job" >&2
    else
        rm -rf "$job"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Shares, one line each in $job/mounts: 9p tag, path (on the host and in the guest),
# ro|rw. Paths with blanks or commas cannot be passed to qemu's -fsdev.
cwd=$(pwd -P)
printf '' > "$job/mounts"
fsdev=()
nshare=0
add_share() { # PATH MODE
    local ro=""
    case $1 in *[[:space:],]*) die "cannot share '$1' with the guest: its path has a blank or a comma" ;; esac
    [ "$2" = ro ] && ro=",readonly=on"
    fsdev+=(-fsdev "local,id=fs$nshare,path=$1,security_model=none,multidevs=remap$ro"
        -device "virtio-9p-pci,fsdev=fs$nshare,mount_tag=s$nshare")
    printf 's%d %s %s\n' "$nshare" "$1" "$2" >> "$job/mounts"
    nshare=$((nshare + 1))
}
covered() { # PATH: under a folder shared already?
    local p
    while read -r _ p _; do
        case $1/ in "$p"/*) return 0 ;; esac
    done < "$job/mounts"
    return 1
}
for d in "$(cd "$srcdir" && pwd -P)" "$cwd" ${shares[@]+"${shares[@]}"}; do
    covered "$d" || add_share "$d" rw
done
for d in /usr/local/cuda*/lib64; do
    [ -d "$d" ] && ! covered "$d" && add_share "$d" ro
done
# Debian's Fashion-MNIST, for the DDP steps.
[ -d /usr/share/datasets ] && add_share /usr/share/datasets ro

# The command: the caller's HOOP_* variables (and --env), then cd and exec.
{
    while IFS='=' read -r name _; do
        case $name in HOOP_RDMA_CACHE | HOOP_RDMA_KERNEL | HOOP_RDMA_KEEP | HOOP_RDMA_MIRROR | HOOP_RDMA_QUIET) continue ;; esac
        printf 'export %s=%q\n' "$name" "${!name}"
    done < <(env | grep -E '^HOOP_[A-Za-z0-9_]*=' || true)
    for e in ${envs[@]+"${envs[@]}"}; do printf 'export %s=%q\n' "${e%%=*}" "${e#*=}"; done
    printf 'cd %q || exit 126\n' "$cwd"
    printf 'exec'
    printf ' %q' "$@"
    printf '\n'
} > "$job/cmd.sh"
cp "$here/guest-init.sh" "$job/guest-init.sh"
: > "$job/out.log"

kernel=$guest/$(cat "$guest/kernel")
bios=()
[ -f /usr/share/qemu/qboot.rom ] && bios=(-bios /usr/share/qemu/qboot.rom)
# Console: quiet kernel, panic (init gone) ends qemu at once (-no-reboot).
append="console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off tsc=reliable no_timer_check"
append="$append rdinit=/init"

t0=$(date +%s)
timeout --kill-after=5 "$timeout_s" "$qemu" -accel tcg,thread=multi -cpu max -smp 2 -m 2G \
    -nodefaults -no-user-config -display none -nic none -no-reboot ${bios[@]+"${bios[@]}"} \
    -kernel "$kernel" -initrd "$guest/initrd.gz" -append "$append" \
    -serial "file:$job/console.log" \
    -fsdev "local,id=fsroot,path=$guest/rootfs,security_model=none,readonly=on,multidevs=remap" \
    -device virtio-9p-pci,fsdev=fsroot,mount_tag=root \
    -fsdev "local,id=fsjob,path=$job,security_model=none" \
    -device virtio-9p-pci,fsdev=fsjob,mount_tag=job \
    "${fsdev[@]}" > "$job/qemu.log" 2>&1 &
qpid=$!
# The command's output, as the guest writes it.
tail -n +1 -F -s 0.5 --pid="$qpid" "$job/out.log" 2> /dev/null &
tpid=$!
qrc=0
wait "$qpid" || qrc=$?
qpid=""
wait "$tpid" 2> /dev/null || true
secs=$(($(date +%s) - t0))

console_tail() {
    echo "$me: last lines of the guest's console:" >&2
    tail -n 25 "$job/console.log" 2> /dev/null | sed 's/^/  | /' >&2 || true
    [ -s "$job/qemu.log" ] && sed 's/^/  qemu: /' "$job/qemu.log" >&2
    return 0
}
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    echo "$me: the guest did not finish within $timeout_s s; killed it" >&2
    [ -f "$job/booted" ] || console_tail
    exit 124
fi
if [ -f "$job/setup-failed" ]; then
    echo "$me: the guest could not set up its RDMA devices: $(cat "$job/setup-failed")" >&2
    exit 1
fi
if [ ! -f "$job/rc" ]; then
    if [ -f "$job/booted" ]; then
        echo "$me: the guest stopped before the command finished (qemu exit $qrc, after $secs s)" >&2
    else
        echo "$me: the guest did not boot (qemu exit $qrc, after $secs s)" >&2
    fi
    console_tail
    exit 1
fi
rc=$(cat "$job/rc")
[ -n "${HOOP_RDMA_QUIET:-}" ] || echo "$me: command exited $rc (guest run $secs s)" >&2
exit "$rc"
