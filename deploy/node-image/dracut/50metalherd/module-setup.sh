#!/bin/bash
# metalherd additions to Debian's 30ignition dracut module:
#  - live root: root=metalherd:live mounts /root.squashfs (shipped as a second
#    initrd, rootfs.img) read-only under a tmpfs overlay at /sysroot;
#    coreos.live.rootfs_url=URL without root= (Fedora CoreOS's live PXE
#    arguments) fetches rootfs.img with curl and unpacks it with cpio first;
#  - DHCP in the initramfs without ip= on a live or Ignition first boot
#    (metalherd-live-generator: a .network and systemd-networkd);
#  - is-live-image, the hook ignition-generator asks to skip the disk-only
#    Ignition units on a live boot;
#  - first boot from disk: copy /boot/ignition/config.ign (where
#    coreos-installer puts it) to /usr/lib/ignition/user.ign, which Ignition
#    reads before asking the platform (metal);
#  - SELinux's setfiles (policycoreutils): Debian's Ignition 2.14 relabels
#    every file it writes and fails without it; the root has SELinux
#    disabled and an empty file-contexts list, so it changes nothing.

check() {
    return 255   # only when asked for (add_dracutmodules)
}

depends() {
    echo ignition systemd systemd-networkd
}

installkernel() {
    hostonly='' instmods squashfs overlay loop ext4 vfat nls_cp437 nls_iso8859-1 nls_utf8
}

install() {
    inst_multiple mount umount mkdir cp modprobe grep bash curl cpio date stat sleep rm
    inst_hook cmdline 90 "$moddir/metalherd-parse-live.sh"
    inst_script "$moddir/is-live-image" /usr/bin/is-live-image
    inst_multiple setfiles
    inst_script "$moddir/metalherd-live-generator" \
        "$systemdutildir/system-generators/metalherd-live-generator"
    inst_script "$moddir/metalherd-live-root.sh" /usr/sbin/metalherd-live-root
    inst_simple "$moddir/metalherd-live-root.service" \
        "$systemdsystemunitdir/metalherd-live-root.service"
    inst_script "$moddir/metalherd-ignition-setup-user.sh" \
        /usr/sbin/metalherd-ignition-setup-user
    inst_simple "$moddir/metalherd-ignition-setup-user.service" \
        "$systemdsystemunitdir/metalherd-ignition-setup-user.service"
    # Only on a first boot from disk (ignition-generator pulls in
    # ignition-diskful.target when ignition.firstboot is set and this is
    # not a live image).
    mkdir -p "$initdir/$systemdsystemunitdir/ignition-diskful.target.requires"
    ln_r "$systemdsystemunitdir/metalherd-ignition-setup-user.service" \
        "$systemdsystemunitdir/ignition-diskful.target.requires/metalherd-ignition-setup-user.service"
}
