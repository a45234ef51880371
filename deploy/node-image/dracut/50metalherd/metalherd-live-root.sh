#!/bin/sh
set -e
img=/root.squashfs
if [ ! -f "$img" ]; then
    echo "metalherd-live: $img is missing: load rootfs.img as a second initrd" >&2
    exit 1
fi
modprobe -a loop squashfs overlay || true
mkdir -p /run/metalherd/live/lower /run/metalherd/live/rw
mount -t squashfs -o ro,loop "$img" /run/metalherd/live/lower
# Writes of the live system (downloads of the OS image too) go to RAM.
mount -t tmpfs -o mode=0755,size=80% metalherd-live-rw /run/metalherd/live/rw
mkdir -p /run/metalherd/live/rw/upper /run/metalherd/live/rw/work
echo "metalherd-live: root is $img (read-only) + tmpfs overlay"
