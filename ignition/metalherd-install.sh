#!/usr/bin/env bash
# metalherd installer for {{ os_name }}: runs once in the network-booted live
# system. Picks the root disk from the Machine's rootDeviceHints, writes the OS
# with {{ installer }}, keeps the partitions the class preserves, hands the node
# config to the installed system, calls home and reboots.
# Every value comes from /etc/metalherd/install.env (EnvironmentFile of
# metalherd-install.service); nothing is pasted into this script.
set -euo pipefail

WORK=/var/tmp/metalherd
mkdir -p "$WORK"

fail() {
  trap - ERR
  echo "metalherd-install: $1" >&2
  /usr/bin/bash /etc/metalherd/callhome.sh failed "$1" || true
  exit 1
}
trap 'fail "install script failed at line $LINENO"' ERR

{% include "metalherd-select-disk.sh" %}

# fetch_image DEST: download the OS image and check its pinned digest.
fetch_image() {
  curl -fL --retry 5 --retry-delay 5 -o "$1" "$IMAGE_URL" ||
    fail "download of the OS image failed"
  if [ -n "${IMAGE_SHA512:-}" ]; then
    echo "$IMAGE_SHA512  $1" | sha512sum -c --quiet - ||
      fail "OS image does not match spec.image.install.sha512"
  fi
  if [ -n "${IMAGE_SHA256:-}" ]; then
    echo "$IMAGE_SHA256  $1" | sha256sum -c --quiet - ||
      fail "OS image does not match spec.image.install.sha256"
  fi
}

DEV="$(select_disk)" || fail "no disk matches spec.rootDeviceHints"
echo "metalherd-install: installing {{ os_name }} $OS_VERSION to $DEV"

if [ -n "${NODE_CONFIG_URL:-}" ]; then
  NODE_CONFIG="$WORK/node.ign"
  curl -fsSL --retry 5 --retry-delay 5 -o "$NODE_CONFIG" "$NODE_CONFIG_URL" ||
    fail "could not fetch the node config"
else
  NODE_CONFIG=/etc/metalherd/node.ign
fi
{% if flatcar %}
# Flatcar writes a whole disk image, so preserved partitions are recorded
# from the old table and appended to the new one (their data is untouched
# as long as they start after the image).
SAVED="$WORK/preserved.sfdisk"
: > "$SAVED"
for label in ${PRESERVE_PARTLABELS:-}; do
  sfdisk --dump "$DEV" 2>/dev/null | grep -F "name=\"$label\"" >> "$SAVED" ||
    echo "metalherd-install: no partition labelled $label to preserve"
done

if [ -n "${IMAGE_SHA512:-}${IMAGE_SHA256:-}" ]; then
  fetch_image "$WORK/flatcar_production_image.bin.bz2"
  flatcar-install -d "$DEV" -f "$WORK/flatcar_production_image.bin.bz2" -i "$NODE_CONFIG" ||
    fail "flatcar-install failed"
else
  # No pinned digest: let flatcar-install verify the release signature.
  flatcar-install -d "$DEV" -b "$IMAGE_BASE_URL" -V "$OS_VERSION" -i "$NODE_CONFIG" ||
    fail "flatcar-install failed"
fi

if [ -s "$SAVED" ]; then
  sgdisk --move-second-header "$DEV" >/dev/null || fail "could not relocate the GPT backup header"
  image_end=0
  while read -r start size; do
    if [ $(( start + size )) -gt "$image_end" ]; then image_end=$(( start + size )); fi
  done < <(sfdisk --dump "$DEV" | sed -n 's/.*start= *\([0-9]*\), size= *\([0-9]*\),.*/\1 \2/p')
  while read -r start; do
    [ "$start" -ge "$image_end" ] || fail "a preserved partition overlaps the new OS image"
  done < <(sed -n 's/.*start= *\([0-9]*\),.*/\1/p' "$SAVED")
  sfdisk --append --no-reread "$DEV" < "$SAVED" || fail "could not restore preserved partitions"
  partx -u "$DEV" || true
fi

if [ -n "${KERNEL_ARGS:-}" ]; then
  OEM="$(lsblk -lnpo NAME,PARTLABEL "$DEV" | awk '$2 == "OEM" { print $1 }')"
  [ -n "$OEM" ] || fail "installed disk has no OEM partition for kernel arguments"
  mkdir -p "$WORK/oem"
  mount "$OEM" "$WORK/oem"
  echo "set linux_append=\"\$linux_append $KERNEL_ARGS\"" >> "$WORK/oem/grub.cfg"
  umount "$WORK/oem"
fi
{% else %}
args=(install "$DEV" --ignition-file "$NODE_CONFIG")
for label in ${PRESERVE_PARTLABELS:-}; do
  args+=(--save-partlabel "$label")
done
if [ -n "${IMAGE_SHA512:-}${IMAGE_SHA256:-}" ]; then
  fetch_image "$WORK/metal.raw.xz"
  # The digest pinned in the class was checked above.
  args+=(--image-file "$WORK/metal.raw.xz" --insecure)
else
  # No pinned digest: coreos-installer checks the image's signature.
  args+=(--image-url "$IMAGE_URL")
fi
coreos-installer "${args[@]}" || fail "coreos-installer failed"
{%- if grub_kargs %}

if [ -n "${KERNEL_ARGS:-}" ]; then
  # The image's grub.cfg appends $metalherd_kargs from this file.
  partx -u "$DEV" 2>/dev/null || true
  udevadm settle || true
  BOOT="$(lsblk -lnpo NAME,LABEL "$DEV" | awk '$2 == "boot" { print $1 }')"
  [ -n "$BOOT" ] || fail "installed disk has no partition labelled boot for kernel arguments"
  mkdir -p "$WORK/boot"
  mount "$BOOT" "$WORK/boot" || fail "could not mount the installed boot partition"
  mkdir -p "$WORK/boot/grub"
  echo "set metalherd_kargs=\"$KERNEL_ARGS\"" > "$WORK/boot/grub/metalherd-kargs.cfg"
  umount "$WORK/boot"
fi
{%- endif %}
{% endif %}
/usr/bin/bash /etc/metalherd/callhome.sh installed "" || true
echo "metalherd-install: done, rebooting"
systemctl reboot
