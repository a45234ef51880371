{# Disk selection from the rootDeviceHints, included by metalherd-install.sh and metalherd-wipe.sh. -#}
# prop NAME: one udev property of the disk under inspection.
prop() {
  printf '%s\n' "$PROPS" | sed -n "s/^$1=//p" | head -n 1
}

# disk_matches NAME: every given hint must match /dev/NAME.
disk_matches() {
  local name="$1" dev="/dev/$1" sys="/sys/block/$1" size gib rota model
  [ -e "$sys/device" ] || return 1
  [ "$(cat "$sys/removable" 2>/dev/null || echo 0)" = 0 ] || return 1
  [ "$(cat "$sys/ro" 2>/dev/null || echo 0)" = 0 ] || return 1
  PROPS="$(udevadm info --query=property --name="$dev" 2>/dev/null || true)"
  if [ -n "${HINT_DEVICE_NAME:-}" ]; then
    [ "$(readlink -f "$HINT_DEVICE_NAME")" = "$dev" ] || return 1
  fi
  if [ -n "${HINT_SERIAL_NUMBER:-}" ]; then
    [ "$(prop ID_SERIAL_SHORT)" = "$HINT_SERIAL_NUMBER" ] ||
      [ "$(prop ID_SERIAL)" = "$HINT_SERIAL_NUMBER" ] || return 1
  fi
  if [ -n "${HINT_MODEL:-}" ]; then
    model="$(sed 's/[[:space:]]*$//' "$sys/device/model" 2>/dev/null || true)"
    [ "$model" = "$HINT_MODEL" ] || return 1
  fi
  if [ -n "${HINT_WWN:-}" ]; then
    [ "$(prop ID_WWN)" = "$HINT_WWN" ] ||
      [ "$(prop ID_WWN_WITH_EXTENSION)" = "$HINT_WWN" ] || return 1
  fi
  size=$(( $(cat "$sys/size") * 512 ))
  gib=$(( size / 1073741824 ))
  if [ -n "${HINT_SIZE_BYTES:-}" ]; then
    [ "$size" = "$HINT_SIZE_BYTES" ] || return 1
  fi
  if [ -n "${HINT_MIN_SIZE_GIB:-}" ]; then
    [ "$gib" -ge "$HINT_MIN_SIZE_GIB" ] || return 1
  fi
  if [ -n "${HINT_ROTATIONAL:-}" ]; then
    rota="$(cat "$sys/queue/rotational" 2>/dev/null || echo 1)"
    if [ "$HINT_ROTATIONAL" = true ]; then [ "$rota" = 1 ] || return 1; fi
    if [ "$HINT_ROTATIONAL" = false ]; then [ "$rota" = 0 ] || return 1; fi
  fi
  return 0
}

# select_disk: the smallest disk matching every hint. A volume found by
# its size (HINT_SIZE_BYTES, its BMC reports no WWN) must be the only disk
# of that size.
select_disk() {
  local best="" best_size=0 path name size found=0
  for path in /sys/block/*; do
    name="$(basename "$path")"
    disk_matches "$name" || continue
    found=$((found + 1))
    size=$(( $(cat "$path/size") * 512 ))
    if [ -z "$best" ] || [ "$size" -lt "$best_size" ]; then
      best="$name"
      best_size="$size"
    fi
  done
  [ -n "$best" ] || return 1
  if [ -n "${HINT_SIZE_BYTES:-}" ] && [ "$found" -gt 1 ]; then
    echo "select_disk: $found disks have the volume's size ($HINT_SIZE_BYTES bytes)" >&2
    return 1
  fi
  echo "/dev/$best"
}
