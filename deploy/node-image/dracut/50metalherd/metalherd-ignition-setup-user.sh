#!/bin/sh
# First boot from disk: coreos-installer wrote the user config to
# ignition/config.ign on the partition labelled "boot". Ignition reads
# /usr/lib/ignition/user.ign (inside the initramfs) before it asks the
# platform, so copy it there.
set -e
mnt=/run/metalherd/bootfs
mkdir -p "$mnt"
mount -o ro /dev/disk/by-label/boot "$mnt"
if [ -f "$mnt/ignition/config.ign" ]; then
    mkdir -p /usr/lib/ignition
    cp "$mnt/ignition/config.ign" /usr/lib/ignition/user.ign
    echo "metalherd: Ignition config taken from boot:/ignition/config.ign"
else
    echo "metalherd: no boot:/ignition/config.ign, Ignition asks the platform"
fi
umount "$mnt"
