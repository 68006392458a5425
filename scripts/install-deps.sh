#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Installs what hoop needs to build, test and train on Debian 12 (idempotent: only
# the missing packages are installed). Run as root, or with sudo available. The last
# line but one is for make check-rdma (tests/rdma/vm.sh: a qemu guest built from
# Debian's packages with mmdebstrap, booted under software emulation); the last, for the
# libFuzzer targets (scripts/fuzz.sh: clang and its sanitizer and fuzzer runtimes).
set -e
PKGS="build-essential autoconf automake libtool pkg-config git check libopenblas-dev
zlib1g-dev libhwloc-dev libibverbs-dev ibverbs-utils dataset-fashion-mnist iproute2 clang-format
python3 procps python3-matplotlib help2man
qemu-system-x86 qemu-system-data mmdebstrap xz-utils
clang libclang-rt-14-dev"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "install-deps: every package hoop needs is installed"
    exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
