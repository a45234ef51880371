#!/bin/sh
# dracut cmdline hook: accept root=metalherd:live (mounted by
# metalherd-live-root.service and the sysroot.mount that
# metalherd-live-generator writes). coreos.live.rootfs_url=URL without a
# root= (Fedora CoreOS's live PXE arguments) means the same.
if [ -z "$root" ] && getarg coreos.live.rootfs_url= >/dev/null; then
    root="metalherd:live"
    unset root_unset
fi
if [ "$root" = "metalherd:live" ]; then
    rootok=1
fi
