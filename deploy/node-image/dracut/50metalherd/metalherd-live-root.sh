#!/bin/bash
# Live root: /root.squashfs read-only under a tmpfs overlay (sysroot.mount
# from metalherd-live-generator mounts the overlay). /root.squashfs is in
# the initramfs when rootfs.img was loaded as a second initrd; otherwise it
# is fetched from coreos.live.rootfs_url (rootfs.img: a cpio holding it).
set -eo pipefail
img=/root.squashfs
url= timeout=300
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        coreos.live.rootfs_url=*) url="${arg#coreos.live.rootfs_url=}" ;;
        metalherd.live.fetch_timeout=*) timeout="${arg#metalherd.live.fetch_timeout=}" ;;
    esac
done
if [ ! -f "$img" ] && [ -n "$url" ]; then
    # systemd-networkd does DHCP (metalherd-live-generator); retry until
    # the network is up or $timeout seconds have passed.
    start=$(date +%s) n=0
    echo "metalherd-live: fetching $url"
    while :; do
        n=$((n + 1))
        rm -f "$img"
        if curl --fail --silent --show-error --location --connect-timeout 10 \
               --speed-limit 1024 --speed-time 60 "$url" |
           (cd / && cpio -i --quiet --make-directories root.squashfs) &&
           [ -s "$img" ]; then
            break
        fi
        rm -f "$img"
        if [ $(( $(date +%s) - start )) -ge "$timeout" ]; then
            echo "metalherd-live: could not fetch $url in ${timeout}s ($n attempts)" >&2
            exit 1
        fi
        sleep 3
    done
    echo "metalherd-live: fetched $url in $(( $(date +%s) - start ))s ($n attempts), $(( $(stat -c %s "$img") / 1048576 )) MiB squashfs"
fi
if [ ! -f "$img" ]; then
    echo "metalherd-live: $img is missing: load rootfs.img as a second initrd or give coreos.live.rootfs_url=" >&2
    exit 1
fi
modprobe -a loop squashfs overlay || true
mkdir -p /run/metalherd/live/lower /run/metalherd/live/rw
mount -t squashfs -o ro,loop "$img" /run/metalherd/live/lower
# Writes of the live system (downloads of the OS image too) go to RAM.
mount -t tmpfs -o mode=0755,size=80% metalherd-live-rw /run/metalherd/live/rw
mkdir -p /run/metalherd/live/rw/upper /run/metalherd/live/rw/work
echo "metalherd-live: root is $img (read-only) + tmpfs overlay"
