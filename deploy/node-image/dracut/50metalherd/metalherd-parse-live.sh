#!/bin/sh
# dracut cmdline hook: accept root=metalherd:live (mounted by
# metalherd-live-root.service and the sysroot.mount that
# metalherd-live-generator writes).
if [ "$root" = "metalherd:live" ]; then
    rootok=1
fi
