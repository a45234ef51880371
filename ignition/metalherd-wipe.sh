#!/usr/bin/env bash
# metalherd wiper: runs once in the network-booted live system of a
# deprovisioning boot. Picks the disk from the Machine's rootDeviceHints (the
# disk the installer wrote), clears the filesystem signatures of every
# partition whose label is not in PRESERVE_PARTLABELS and takes it out of the
# partition table; with nothing to preserve it also zaps the partition tables
# themselves (GPT, its backup and the protective MBR). Calls home `wiped`, or
# `failed` with the reason, and powers off.
# Every value comes from /etc/metalherd/wipe.env (EnvironmentFile of
# metalherd-wipe.service); nothing is pasted into this script.
set -euo pipefail

fail() {
  trap - ERR
  echo "metalherd-wipe: $1" >&2
  /usr/bin/bash /etc/metalherd/callhome.sh failed "$1" || true
  exit 1
}
trap 'fail "wipe script failed at line $LINENO"' ERR

{% include "metalherd-select-disk.sh" %}

DEV="$(select_disk)" || fail "no disk matches spec.rootDeviceHints"
echo "metalherd-wipe: wiping $DEV"
udevadm settle || true

kept=0
numbers=()
while read -r part type label; do
  [ "$type" = part ] || continue
  keep=no
  for l in ${PRESERVE_PARTLABELS:-}; do
    if [ "$label" = "$l" ]; then keep=yes; fi
  done
  if [ "$keep" = yes ]; then
    echo "metalherd-wipe: keeping $part ($label)"
    kept=$(( kept + 1 ))
    continue
  fi
  wipefs --all --force "$part" >/dev/null || fail "could not clear the signatures of $part"
  numbers+=("$(cat "/sys/class/block/${part##*/}/partition")")
done < <(lsblk -lnpo NAME,TYPE,PARTLABEL "$DEV")

if [ "$kept" -eq 0 ]; then
  sgdisk --zap-all "$DEV" >/dev/null || fail "could not zap the partition tables of $DEV"
  wipefs --all --force "$DEV" >/dev/null || fail "could not clear the signatures of $DEV"
else
  for n in "${numbers[@]}"; do
    sgdisk --delete="$n" "$DEV" >/dev/null || fail "could not delete partition $n of $DEV"
  done
fi
partx -u "$DEV" || true
sync

/usr/bin/bash /etc/metalherd/callhome.sh wiped "" || true
echo "metalherd-wipe: done, powering off"
systemctl poweroff
