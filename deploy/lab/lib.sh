# Shared functions of the virtual rack (sourced by deploy/lab/up and tests).
# Everything runs inside one network namespace: a bridge that is the
# provisioning network, libvirtd and its VMs, the Redfish emulator and
# metalherd. Nothing leaves the namespace.

LAB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

lab_log() { echo "lab: $*" >&2; }

# lab_netns_up NS BRIDGE CIDR
lab_netns_up() {
  local ns=$1 br=$2 cidr=$3
  ip netns add "$ns"
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip link add "$br" type bridge
  ip netns exec "$ns" ip link set "$br" type bridge forward_delay 0 stp_state 0
  case "$cidr" in
    *:*)
      # IPv6: usable at once (no duplicate address detection on the
      # rack's own bridge), and no IPv4 address at all.
      ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 net.ipv6.conf."$br".accept_dad=0
      ip netns exec "$ns" ip link set "$br" type bridge mcast_snooping 0
      ip netns exec "$ns" ip addr add "$cidr" dev "$br" nodad
      ;;
    *) ip netns exec "$ns" ip addr add "$cidr" dev "$br" ;;
  esac
  ip netns exec "$ns" ip link set "$br" up
}

# Start libvirtd inside the namespace with its sockets under RUN and its
# own state: in the mount namespace `ip netns exec` makes (slave to the
# host's, so nothing propagates back), RUN/libvirt-state is bound over
# libvirt's host paths (/run/libvirt, /var/lib/libvirt, /var/cache/libvirt,
# /var/log/libvirt, /etc/libvirt/qemu and its storage pools) and over
# qemu.conf, which runs the QEMU driver without systemd, cgroups or
# security drivers. The host's libvirt configuration is never written, and
# two labs (two test binaries at once) do not see each other's domains.
# lab_libvirt_up NS RUN
lab_libvirt_up() {
  local ns=$1 run=$2
  local s="$run/libvirt-state"
  mkdir -p "$run/libvirt" "$s/run" "$s/lib/qemu" "$s/cache/qemu" "$s/log/qemu" \
    "$s/etc/qemu/networks" "$s/etc/storage" /run/libvirt /var/lib/libvirt \
    /var/cache/libvirt /var/log/libvirt /etc/libvirt/qemu /etc/libvirt/storage
  cat > "$s/qemu.conf" <<CONF
security_driver = "none"
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
cgroup_controllers = []
namespaces = []
stdio_handler = "file"
CONF
  # The host's probe of the QEMU binary, if it has one, spares this
  # daemon its own (libvirt checks it against the binary and redoes it
  # when stale).
  cp -a /var/cache/libvirt/qemu/capabilities "$s/cache/qemu/" 2>/dev/null || true
  cat > "$run/libvirtd.conf" <<CONF
unix_sock_dir = "$run/libvirt"
unix_sock_group = "root"
auth_unix_rw = "none"
auth_unix_ro = "none"
listen_tls = 0
listen_tcp = 0
CONF
  # shellcheck disable=SC2016
  ip netns exec "$ns" sh -c '
    set -e
    touch /etc/libvirt/qemu.conf
    mount --bind "$1/qemu.conf" /etc/libvirt/qemu.conf
    mount --bind "$1/etc/qemu" /etc/libvirt/qemu
    mount --bind "$1/etc/storage" /etc/libvirt/storage
    mount --bind "$1/run" /run/libvirt
    mount --bind "$1/lib" /var/lib/libvirt
    mount --bind "$1/cache" /var/cache/libvirt
    mount --bind "$1/log" /var/log/libvirt
    exec /usr/sbin/libvirtd --config "$2/libvirtd.conf" --pid-file "$2/libvirtd.pid"
  ' sh "$s" "$run" > "$run/libvirtd.log" 2>&1 &
  echo $! > "$run/libvirtd.launcher.pid"
  for _ in $(seq 1 100); do
    [ -S "$run/libvirt/libvirt-sock" ] && return 0
    sleep 0.1
  done
  lab_log "libvirtd did not start:"; tail -n 20 "$run/libvirtd.log" >&2; return 1
}

lab_virsh() { local run=$1; shift; virsh -c "qemu:///system?socket=$run/libvirt/libvirt-sock" "$@"; }

# lab_define_vm RUN NAME MAC DISK BRIDGE [uefi|bios|secboot]
# LAB_VM_MEMORY (MiB, default 512) and LAB_VM_CPUS (default 1) size the VM;
# LAB_VM_DISK_BUS=virtio or sata (default ide) attaches DISK as a virtio or
# SATA disk with serial LAB_VM_DISK_SERIAL (default NAME-disk0); LAB_VM_DISK2=FILE adds a
# second virtio disk with serial LAB_VM_DISK2_SERIAL (default NAME-disk1).
# LAB_VM_IPV6_ONLY=1 turns OVMF's IPv4 network stack off (fw_cfg
# opt/org.tianocore/IPv4Support=no): no PXEv4 or HTTPv4 boot entries, as on
# an IPv6-only provisioning network.
# LAB_VM_ON_REBOOT=destroy turns a guest reboot into a power-off: libvirt
# applies a boot device change (metalherd's "boot from disk" after an
# install) only when a VM starts, where a real server's BMC applies it at
# the next reset; metalherd powers an installed server that is off back on.
lab_define_vm() {
  local run=$1 name=$2 mac=$3 disk=$4 br=$5 fw=${6:-uefi}
  local loader="" nic="<model type='e1000'/>" disks
  local mem=${LAB_VM_MEMORY:-512} cpus=${LAB_VM_CPUS:-1}
  if [ "${LAB_VM_DISK_BUS:-ide}" = virtio ]; then
    disks="<disk type='file' device='disk'><driver name='qemu' type='raw' cache='unsafe'/><source file='$disk'/><target dev='vda' bus='virtio'/><serial>${LAB_VM_DISK_SERIAL:-$name-disk0}</serial></disk>"
  elif [ "${LAB_VM_DISK_BUS:-ide}" = sata ]; then
    disks="<disk type='file' device='disk'><driver name='qemu' type='raw' cache='unsafe'/><source file='$disk'/><target dev='sda' bus='sata'/><serial>${LAB_VM_DISK_SERIAL:-$name-disk0}</serial></disk>"
  else
    disks="<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='$disk'/><target dev='hda' bus='ide'/></disk>"
  fi
  if [ -n "${LAB_VM_DISK2:-}" ]; then
    disks="$disks<disk type='file' device='disk'><driver name='qemu' type='raw' cache='unsafe'/><source file='$LAB_VM_DISK2'/><target dev='vdb' bus='virtio'/><serial>${LAB_VM_DISK2_SERIAL:-$name-disk1}</serial></disk>"
  fi
  local machine=pc features="<acpi/>"
  if [ "$fw" = uefi ]; then
    # OVMF's own virtio-net driver and PXE client (no iPXE option ROM), so
    # the firmware fetches iPXE over TFTP as real UEFI servers do.
    nic="<model type='virtio'/><rom enabled='no'/>"
    cp /usr/share/OVMF/OVMF_VARS_4M.fd "$run/$name.vars.fd"
    loader="<loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader><nvram>$run/$name.vars.fd</nvram>"
  elif [ "$fw" = secboot ]; then
    # Secure Boot enforced (OVMF's SMM build, q35) with Microsoft's keys
    # enrolled, as servers ship. The VARS template is what sushy-tools
    # reads the Secure Boot state from (SUSHY_EMULATOR_SECURE_BOOT_ENABLED_NVRAM);
    # q35 has no IDE: give it LAB_VM_DISK_BUS=virtio.
    local vars=/usr/share/OVMF/OVMF_VARS_4M.ms.fd code=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd
    nic="<model type='virtio'/><rom enabled='no'/>"
    machine=q35 features="<acpi/><smm state='on'/>"
    cp "$vars" "$run/$name.vars.fd"
    loader="<loader readonly='yes' secure='yes' type='pflash'>$code</loader><nvram template='$vars'>$run/$name.vars.fd</nvram>"
  fi
  local sysinfo=""
  if [ "${LAB_VM_IPV6_ONLY:-}" = 1 ]; then
    sysinfo="<sysinfo type='fwcfg'><entry name='opt/org.tianocore/IPv4Support'>no</entry></sysinfo>"
  fi
  cat > "$run/$name.xml" <<XML
<domain type='qemu'>
  <name>$name</name>
  <memory unit='MiB'>$mem</memory>
  <vcpu>$cpus</vcpu>
  $sysinfo
  <os><type arch='x86_64' machine='$machine'>hvm</type>$loader<boot dev='hd'/></os>
  <features>$features</features>
  <on_reboot>${LAB_VM_ON_REBOOT:-restart}</on_reboot>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    $disks
    <interface type='bridge'>
      <mac address='$mac'/>
      <source bridge='$br'/>
      $nic
    </interface>
    <serial type='file'><source path='$run/$name.console' append='on'/><target port='0'/></serial>
    <console type='file'><source path='$run/$name.console' append='on'/><target type='serial' port='0'/></console>
  </devices>
</domain>
XML
  lab_virsh "$run" define "$run/$name.xml" >/dev/null
  lab_virsh "$run" domuuid "$name"
}

# lab_sushy_up NS RUN PORT: the Redfish emulator with the libvirt driver,
# so its power actions start and stop the VMs.
lab_sushy_up() {
  local ns=$1 run=$2 port=$3 venv=$4
  # Its state (virtual media) and downloads (the ISOs VirtualMedia
  # inserts) stay in the lab; an inserted ISO becomes a volume of the
  # lab's pool `metalherd-lab`, the CD the VM boots.
  mkdir -p "$run/sushy-state" "$run/sushy-tmp"
  lab_pool_up "$run"
  cat > "$run/sushy.conf" <<CONF
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_LISTEN_PORT = $port
SUSHY_EMULATOR_LIBVIRT_URI = 'qemu:///system?socket=$run/libvirt/libvirt-sock'
SUSHY_EMULATOR_BOOT_LOADER_MAP = {'UEFI': {'x86_64': '/usr/share/OVMF/OVMF_CODE_4M.fd'}, 'Legacy': {'x86_64': None}}
SUSHY_EMULATOR_STATE_DIR = '$run/sushy-state'
SUSHY_EMULATOR_STORAGE_POOL = 'metalherd-lab'
${LAB_SUSHY_EXTRA:-}
CONF
  TMPDIR="$run/sushy-tmp" ip netns exec "$ns" "$venv/bin/sushy-emulator" --config "$run/sushy.conf" > "$run/sushy.log" 2>&1 &
  echo $! > "$run/sushy.pid"
  for _ in $(seq 1 150); do
    ip netns exec "$ns" curl -fs "http://127.0.0.1:$port/redfish/v1/" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  lab_log "sushy-emulator did not start; see $run/sushy.log"; return 1
}

# lab_raid_up NS RUN PORT NAME=UUID...: a RAID controller for the VMs whose
# Redfish Storage lab_raid_sushy_conf declared. sushy-tools creates a
# volume POSTed to a Storage's Volumes as a file in its libvirt pool (a
# transient pool `metalherd-lab` under RUN/pool, made here) but, unlike a
# controller, shows it to no server, and names it by its process id and
# the second, so two servers' volumes made in the same second would share
# one file. This loop plays the controller's other half: every second it
# reads each VM's volumes from sushy-tools and gives every volume a disk
# of its own, RUN/raid/NAME-ID.img of the volume's CapacityBytes, attached
# as the next virtio disk (serial: the volume's Id) to the VM's definition
# and, when it runs, to the running VM. It attaches again what a
# definition lost (sushy-tools rewrites it for every boot device change).
# It stops with sushy-tools (or after six hours). Log: RUN/raid.log.
lab_raid_up() {
  local ns=$1 run=$2 port=$3; shift 3
  mkdir -p "$run/raid"
  lab_pool_up "$run"
  (
    set +eu +o pipefail
    # Bounded: it ends with the emulator it reads, and after six hours.
    for _ in $(seq 1 21600); do
      kill -0 "$(cat "$run/sushy.pid" 2>/dev/null)" 2>/dev/null || exit 0
      for pair in "$@"; do lab_raid_pass "$ns" "$run" "$port" "${pair%%=*}" "${pair#*=}"; done
      sleep 1
    done
  ) >> "$run/raid.log" 2>&1 &
  echo $! > "$run/raid.pid"
}

# lab_pool_up RUN: the lab's transient storage pool `metalherd-lab` under
# RUN/pool (sushy-tools' volumes: RAID volumes, virtual media ISOs), once.
lab_pool_up() {
  local run=$1
  mkdir -p "$run/pool"
  lab_virsh "$run" pool-info metalherd-lab >/dev/null 2>&1 && return 0
  lab_virsh "$run" pool-create-as metalherd-lab dir --target "$run/pool" >/dev/null
}

# lab_raid_pass NS RUN PORT NAME UUID: one pass of lab_raid_up for one VM.
lab_raid_pass() {
  local ns=$1 run=$2 port=$3 name=$4 uuid=$5 base vols v id bytes img xml live dev
  base="http://127.0.0.1:$port/redfish/v1/Systems/$uuid/Storage/1/Volumes"
  vols=$(ip netns exec "$ns" curl -fs "$base" 2>/dev/null) || return 0
  for v in $(printf '%s' "$vols" | grep -o "\"/redfish/v1/Systems/$uuid/Storage/1/Volumes/[^\"]*\"" | tr -d '"'); do
    id=${v##*/}
    img="$run/raid/$name-$id.img"
    if [ ! -e "$img" ]; then
      bytes=$(ip netns exec "$ns" curl -fs "http://127.0.0.1:$port$v" | sed -n 's/.*"CapacityBytes": *\([0-9]*\).*/\1/p' | head -n 1)
      [ -n "$bytes" ] && [ "$bytes" -gt 0 ] || continue
      truncate -s "$bytes" "$img"
      echo "$(date +%T) $name: volume $id, $bytes bytes: $img"
    fi
    xml=$(lab_virsh "$run" dumpxml --inactive "$name" 2>/dev/null) || continue
    if ! printf '%s' "$xml" | grep -qF "$img"; then
      # A definition read while sushy-tools rewrites it can lack the
      # disk for a moment: attach only when a second look agrees.
      sleep 1
      xml=$(lab_virsh "$run" dumpxml --inactive "$name" 2>/dev/null) || continue
      if ! printf '%s' "$xml" | grep -qF "$img"; then
        dev=$(lab_raid_free_dev "$xml")
        lab_virsh "$run" attach-disk "$name" "$img" "$dev" --targetbus virtio --cache unsafe --serial "$id" --config >/dev/null &&
          echo "$(date +%T) $name: $id attached to the definition as $dev"
      fi
    fi
    # A definition naming the image twice does not start (QEMU cannot
    # lock the file twice): keep the first, as a controller shows a
    # volume once.
    for dev in $(lab_raid_targets "$xml" "$img" | tail -n +2); do
      lab_virsh "$run" detach-disk "$name" "$dev" --config >/dev/null &&
        echo "$(date +%T) $name: $id was in the definition twice; detached $dev"
    done
    if [ "$(lab_virsh "$run" domstate "$name" 2>/dev/null)" = running ]; then
      live=$(lab_virsh "$run" dumpxml "$name" 2>/dev/null) || continue
      if ! printf '%s' "$live" | grep -qF "$img"; then
        dev=$(lab_raid_free_dev "$live")
        lab_virsh "$run" attach-disk "$name" "$img" "$dev" --targetbus virtio --cache unsafe --serial "$id" --live >/dev/null &&
          echo "$(date +%T) $name: $id attached to the running VM as $dev"
      fi
    fi
  done
}

# lab_raid_targets XML IMG: the targets (vdX) of XML's disks whose source
# is the file IMG, in order.
lab_raid_targets() {
  { printf '%s' "$1" | tr -d '\n' | sed "s#<disk #\n<disk #g" | grep -F "<source file='$2'/>" |
    sed -n "s#.*<target dev='\([a-z]*\)'.*#\1#p"; } || true
}

# lab_raid_free_dev XML: the first virtio target from vdc on that XML lacks.
lab_raid_free_dev() {
  local l
  for l in c d e f g h; do
    printf '%s' "$1" | grep -q "dev='vd$l'" || { echo "vd$l"; return; }
  done
  echo vdz
}

# lab_raid_sushy_conf UUID...: sushy-tools' Storage for each VM (config
# lines for LAB_SUSHY_EXTRA): one controller with one 16 GiB drive and no
# volume yet, volumes made in the pool lab_raid_up makes.
lab_raid_sushy_conf() {
  local u storage="" drives="" volumes=""
  for u in "$@"; do
    storage="$storage'$u': [{'Id': '1', 'Name': 'Lab RAID controller', 'StorageControllers': [{'MemberId': '0', 'Name': 'Lab RAID', 'SpeedGbps': 12}], 'Drives': ['$u-d0']}], "
    drives="$drives('$u', '1'): [{'Id': '$u-d0', 'Name': 'Lab drive 0', 'CapacityBytes': 17179869184, 'Protocol': 'SATA'}], "
    volumes="$volumes('$u', '1'): [], "
  done
  echo "SUSHY_EMULATOR_STORAGE_POOL = 'metalherd-lab'"
  echo "SUSHY_EMULATOR_STORAGE = {$storage}"
  echo "SUSHY_EMULATOR_DRIVES = {$drives}"
  echo "SUSHY_EMULATOR_VOLUMES = {$volumes}"
}

# lab_down NS RUN: stop everything the lab started (by PID).
lab_down() {
  local ns=$1 run=$2
  if [ -S "$run/libvirt/libvirt-sock" ]; then
    for d in $(lab_virsh "$run" list --all --name 2>/dev/null); do
      lab_virsh "$run" destroy "$d" >/dev/null 2>&1 || true
      lab_virsh "$run" undefine --nvram "$d" >/dev/null 2>&1 || lab_virsh "$run" undefine "$d" >/dev/null 2>&1 || true
    done
    lab_virsh "$run" pool-destroy metalherd-lab >/dev/null 2>&1 || true
  fi
  for p in raid sushy mirror metalherd metalherd-b kube-controller-manager kube-apiserver etcd libvirtd; do
    [ -f "$run/$p.pid" ] && kill "$(cat "$run/$p.pid")" 2>/dev/null || true
  done
  sleep 0.5
  if ip netns list | grep -qw "$ns"; then
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  fi
}

# lab_config RUN BRIDGE: metalherd's config for the lab's boot network
# (10.89.0.0/24 exists only inside the lab namespace).
lab_config() {
  local run=$1 br=$2 root=$3
  # LAB_NO_DHCP=1: no DHCP server on the rack's network at all (virtual
  # media boots).
  if [ "${LAB_IPV6:-}" = 1 ]; then
    # LAB_IPV6=1: an IPv6-only network (lab_netns_up with fd00:89::1/64):
    # DHCPv6 and router advertisements that make firmware and iPXE ask it,
    # TFTP and boot HTTP on the IPv6 address.
    cat > "$run/config.yaml" <<CONF
dhcp6:
  interface: $br
  serverAddress: "fd00:89::1"
  httpBootUrl: "http://[fd00:89::1]:8080"
  subnets:
  - subnet: "fd00:89::/64"
    ranges: [{start: "fd00:89::100", end: "fd00:89::150"}]
    dns: ["fd00:89::1"]
tftp:
  listen: "[fd00:89::1]:69"
  root: $root/boot-assets
boot:
  listen: "[fd00:89::1]:8080"
  baseUrl: "http://[fd00:89::1]:8080"
  assetsDir: $root/boot-assets
  kernelArgs: [console=ttyS0]
  routerAdvertisement:
    interface: $br
    managed: true
    prefixes: [{prefix: "fd00:89::/64"}]
CONF
    lab_config_controller >> "$run/config.yaml"
    return 0
  fi
  if [ "${LAB_NO_DHCP:-}" = 1 ]; then
    : > "$run/config.yaml"
  else
    cat > "$run/config.yaml" <<CONF
dhcp:
  interface: $br
  serverAddress: 10.89.0.1
  httpBootUrl: http://10.89.0.1:8080
  subnets:
  - subnet: 10.89.0.0/24
    ranges: [{start: 10.89.0.100, end: 10.89.0.150}]
    router: 10.89.0.1
    dns: [10.89.0.1]
CONF
  fi
  cat >> "$run/config.yaml" <<CONF
tftp:
  listen: 10.89.0.1:69
  root: $root/boot-assets
boot:
  listen: 10.89.0.1:8080
  assetsDir: $root/boot-assets
  kernelArgs: [console=ttyS0]
  routerAdvertisement: {interface: $br}
CONF
  lab_config_controller >> "$run/config.yaml"
}

# lab_config_controller: the lab config's controller section.
lab_config_controller() {
  cat <<CONF
controller:
  installDeadlineSeconds: ${LAB_INSTALL_DEADLINE:-600}
  joinDeadlineSeconds: ${LAB_JOIN_DEADLINE:-600}
  resyncSeconds: 5
  bootStormLimit: ${LAB_BOOT_STORM_LIMIT:-4}
CONF
}

# lab_manifests RUN KERNEL INITRD UUID...: a bootstrap-token Secret, the
# lab's MachineClasses (Debian's kernel + the lab initramfs as the "OS";
# `lab` keeps the disk's DATA partition across reinstalls, `lab-wipe` is the
# same and also wipes the disk when its machine is deprovisioned), and one
# Machine with its BMC Secret per VM, addressed by its Redfish system. VMs
# listed in LAB_WIPE_VMS (numbers, e.g. "2") use `lab-wipe`. LAB_BMC_PORT
# (default 8000, the Redfish emulator) is the port the Machines' BMC
# addresses use, e.g. a proxy in front of the emulator.
lab_manifests() {
  local run=$1 kernel=$2 initrd=$3; shift 3
  local ksum isum i=0 c class
  ksum=$(sha256sum "$kernel" | cut -d' ' -f1)
  isum=$(sha256sum "$initrd" | cut -d' ' -f1)
  cat > "$run/class.yaml" <<YAML
apiVersion: v1
kind: Secret
metadata: {name: lab-join-token, namespace: default}
stringData: {token: "abcdef.0123456789abcdef"}
YAML
  for c in lab lab-wipe; do
    cat >> "$run/class.yaml" <<YAML
---
apiVersion: metalherd.dev/v1alpha1
kind: MachineClass
metadata: {name: $c, namespace: default}
spec:
  image:
    os: flatcar
    version: ${LAB_IMAGE_VERSION:-4230.2.3}
    kernel: {url: "file://$kernel", sha256: "$ksum"}
    initrd: {url: "file://$initrd", sha256: "$isum"}
    # The image an installer downloads and writes to disk; the lab's test
    # OS rewrites the lab disk's ROOT partition instead, so any pinned file
    # on the boot server serves.
    install: {url: "http://10.89.0.1:8080/assets/undionly.kpxe", sha256: "$(sha256sum "$LAB_ROOT/boot-assets/undionly.kpxe" | cut -d' ' -f1)"}
  kubernetes: {version: ${LAB_KUBELET_VERSION:-v1.33.2}}
  containerRuntime: {name: containerd, version: "1.7.27"}
  join:
    apiServerEndpoint: "10.89.0.1:6443"
    caCertHashes: ["sha256:$(printf 'ab%.0s' $(seq 1 32))"]
    tokenSecretRef: {name: lab-join-token}
  preservePartitions: [DATA]
  wipeOnDeprovision: $([ "$c" = lab-wipe ] && echo true || echo false)
YAML
  done
  : > "$run/machines.yaml"
  for uuid in "$@"; do
    i=$((i + 1))
    class=lab
    case " ${LAB_WIPE_VMS:-} " in *" $i "*) class=lab-wipe ;; esac
    lab_machine "$i" "$uuid" "$class" >> "$run/machines.yaml"
  done
}

# lab_machine I UUID [CLASS]: VM I's BMC Secret and Machine (addressed by
# its Redfish system; LAB_BMC_PORT, default 8000, is the port its BMC
# address uses), with CLASS as its class, or none, and LAB_HINTS_VMI, else
# LAB_HINTS (a YAML flow map, e.g. "{serialNumber: S}"), as its
# rootDeviceHints when set.
lab_machine() {
  local i=$1 uuid=$2 class=${3:-}
  cat <<YAML
---
apiVersion: v1
kind: Secret
metadata: {name: vm$i-bmc, namespace: default}
stringData: {username: admin, password: "lab-bmc-7Qx2vN9k"}
---
apiVersion: metalherd.dev/v1alpha1
kind: Machine
metadata: {name: vm$i, namespace: default, labels: {rack: lab}}
spec:
  bmc:
    address: redfish+http://127.0.0.1:${LAB_BMC_PORT:-8000}/redfish/v1/Systems/$uuid
    credentialsSecretRef: {name: vm$i-bmc}
YAML
  # LAB_IPV6=1: the IPv6-only rack's addresses (on-link, no gateway).
  if [ "${LAB_IPV6:-}" = 1 ]; then
    echo "  network: {address: \"fd00:89::$((10 + i))/64\", hostname: vm$i}"
  else
    # The resolver the lab's DHCP names too: a node with none falls back
    # to loopback, where a cluster's CoreDNS then forwards to itself.
    echo "  network: {address: 10.89.0.$((10 + i))/24, gateway: 10.89.0.1, dns: [10.89.0.1], hostname: vm$i}"
  fi
  [ -z "$class" ] || echo "  classRef: {name: $class}"
  local hints secure
  eval "hints=\${LAB_HINTS_VM$i:-\${LAB_HINTS:-}}"
  [ -z "$hints" ] || echo "  rootDeviceHints: $hints"
  eval "secure=\${LAB_SECURE_BOOT_VM$i:-}"
  [ -z "$secure" ] || echo "  secureBoot: $secure"
  local boot
  eval "boot=\${LAB_BOOT_VM$i:-}"
  [ -z "$boot" ] || echo "  boot: $boot"
}

# lab_kube_up NS RUN [TOKEN]: a real Kubernetes control plane for the rack,
# made the way `kubeadm init` makes one (deploy/lab/kubeadm-config.yaml.in):
# kubeadm's PKI and controller-manager kubeconfig under RUN/kube, etcd,
# kube-apiserver and kube-controller-manager (the release
# scripts/kubernetes-build builds) run in the rack's namespace with the
# flags of kubeadm's static Pods, the API on port 6443 of every address
# there (loopback and 10.89.0.1), then kubeadm's upload-config and
# bootstrap-token phases: a node joins with `kubeadm join` to
# 10.89.0.1:6443, bootstrap token TOKEN (default abcdef.0123456789abcdef)
# and the CA hash written to RUN/kube/ca-hash (sha256:...). Also an admin
# token and an audit log under RUN/kube, metalherd's CRDs installed; writes
# the admin kubeconfig (https://127.0.0.1:6443) to RUN/kube/admin.kubeconfig.
# kubeadm's output: RUN/kube/kubeadm.log.
lab_kube_up() {
  local ns=$1 run=$2 k="$2/kube" token=${3:-abcdef.0123456789abcdef} bin admin i c
  local -a args
  bin=$("$LAB_ROOT/scripts/kubernetes-build" | tail -n1)
  # The admin token, the keys and the kubeconfigs are for root alone.
  mkdir -p -m 0700 "$k"
  echo "$ns" > "$k/netns"
  # Two renderings of kubeadm's configuration: the lab's paths for the
  # phases run here, the standard ones in the copy uploaded to the cluster
  # (joining nodes read it: the kubelet's clientCAFile comes from
  # certificatesDir).
  sed -e "s|@PKI@|$k/pki|" -e "s|@ETCD@|$k/etcd|" -e "s|@TOKEN@|$token|" \
    "$LAB_ROOT/deploy/lab/kubeadm-config.yaml.in" > "$k/kubeadm.yaml"
  sed -e "s|@PKI@|/etc/kubernetes/pki|" -e "s|@ETCD@|/var/lib/etcd|" -e "s|@TOKEN@|$token|" \
    "$LAB_ROOT/deploy/lab/kubeadm-config.yaml.in" > "$k/kubeadm-cluster.yaml"
  # Certificates, the controller-manager's and the super-admin's kubeconfigs
  # (server https://10.89.0.1:6443), and the static Pod manifests (dry run:
  # written to RUN/kube/manifests, nothing under /etc/kubernetes) whose
  # command lines the processes below run.
  if ! (
    ip netns exec "$ns" "$bin/kubeadm" init phase certs all --config "$k/kubeadm.yaml" &&
    for c in controller-manager super-admin; do
      ip netns exec "$ns" "$bin/kubeadm" init phase kubeconfig "$c" --config "$k/kubeadm.yaml" \
        --kubeconfig-dir "$k" || exit 1
    done &&
    KUBEADM_INIT_DRYRUN_DIR="$k/manifests" ip netns exec "$ns" "$bin/kubeadm" init phase etcd local \
      --dry-run --config "$k/kubeadm.yaml" &&
    for c in apiserver controller-manager; do
      KUBEADM_INIT_DRYRUN_DIR="$k/manifests" ip netns exec "$ns" "$bin/kubeadm" init phase \
        control-plane "$c" --dry-run --config "$k/kubeadm.yaml" || exit 1
    done
  ) > "$k/kubeadm.log" 2>&1; then
    tail -n 20 "$k/kubeadm.log" >&2; lab_log "kubeadm init phases failed: $k/kubeadm.log"; return 1
  fi
  openssl x509 -pubkey -noout -in "$k/pki/ca.crt" | openssl pkey -pubin -outform der 2>/dev/null \
    | sha256sum | sed 's/^\([0-9a-f]*\).*/sha256:\1/' > "$k/ca-hash"
  admin=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$admin,lab-admin,lab-admin,\"system:masters\"" > "$k/tokens.csv"
  printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n' > "$k/audit-policy.yaml"
  # A static Pod's command line: its `- --flag=value` lines.
  mapfile -t args < <(sed -n 's/^    - \(--.*\)$/\1/p' "$k/manifests/etcd.yaml")
  ip netns exec "$ns" "$bin/etcd" "${args[@]}" --log-level warn > "$k/etcd.log" 2>&1 &
  echo $! > "$run/etcd.pid"
  mapfile -t args < <(sed -n 's/^    - \(--.*\)$/\1/p' "$k/manifests/kube-apiserver.yaml")
  ip netns exec "$ns" "$bin/kube-apiserver" "${args[@]}" --bind-address 0.0.0.0 \
    --token-auth-file "$k/tokens.csv" --audit-policy-file "$k/audit-policy.yaml" \
    --audit-log-path "$k/audit.log" --audit-log-format json --profiling=false \
    > "$k/kube-apiserver.log" 2>&1 &
  echo $! > "$run/kube-apiserver.pid"
  cat > "$k/admin.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: "$(base64 -w0 < "$k/pki/ca.crt")"}
users:
- name: lab-admin
  user: {token: "$admin"}
contexts:
- name: lab
  context: {cluster: lab, user: lab-admin, namespace: default}
current-context: lab
KC
  for i in $(seq 1 300); do
    if ip netns exec "$ns" curl -fs --cacert "$k/pki/ca.crt" -H "Authorization: Bearer $admin" \
      https://127.0.0.1:6443/readyz >/dev/null 2>&1; then
      break
    fi
    kill -0 "$(cat "$run/kube-apiserver.pid")" 2>/dev/null || { tail -n 20 "$k/kube-apiserver.log" >&2; return 1; }
    [ "$i" -lt 300 ] || { lab_log "kube-apiserver did not become ready: $k/kube-apiserver.log"; return 1; }
    sleep 0.2
  done
  # Started once the API is ready (its RBAC in place), without leader
  # election (the lab runs one; under load a renewal that times out made it
  # exit, leaving kubelets' certificate requests unsigned); its client rate
  # limits raised (a start-up of 35 controllers, each with its own service
  # account, otherwise takes 5 s).
  mapfile -t args < <(sed -n 's/^    - \(--.*\)$/\1/p' "$k/manifests/kube-controller-manager.yaml" \
    | sed "s|=/etc/kubernetes/controller-manager.conf$|=$k/controller-manager.conf|")
  ip netns exec "$ns" "$bin/kube-controller-manager" "${args[@]}" \
    --leader-elect=false --kube-api-qps 100 --kube-api-burst 200 > "$k/kube-controller-manager.log" 2>&1 &
  echo $! > "$run/kube-controller-manager.pid"
  # kubeadm's ConfigMaps (kubeadm-config, kubelet-config) and the bootstrap
  # token with its RBAC (CSR creation and auto-approval, reading the
  # ConfigMaps and Nodes) and kube-public/cluster-info, whose server and
  # CA come from the super-admin kubeconfig: what joining nodes reach.
  for c in "upload-config kubeadm" "upload-config kubelet" "bootstrap-token --skip-token-print"; do
    # shellcheck disable=SC2086
    ip netns exec "$ns" "$bin/kubeadm" init phase $c --config "$k/kubeadm-cluster.yaml" \
      --kubeconfig "$k/super-admin.conf" >> "$k/kubeadm.log" 2>&1 \
      || { tail -n 20 "$k/kubeadm.log" >&2; lab_log "kubeadm init phase $c failed: $k/kubeadm.log"; return 1; }
  done
  # kube-controller-manager's bootstrapsigner signs cluster-info for the token.
  for i in $(seq 1 300); do
    [ -n "$(lab_kubectl "$run" -n kube-public get configmap cluster-info \
      -o "jsonpath={.data.jws-kubeconfig-${token%%.*}}" 2>/dev/null)" ] && break
    kill -0 "$(cat "$run/kube-controller-manager.pid")" 2>/dev/null \
      || { tail -n 20 "$k/kube-controller-manager.log" >&2; return 1; }
    [ "$i" -lt 300 ] || { lab_log "cluster-info was not signed: $k/kube-controller-manager.log"; return 1; }
    sleep 0.2
  done
  lab_kubectl "$run" apply -f "$LAB_ROOT/deploy/crds/" >/dev/null
  lab_kubectl "$run" wait --for=condition=Established --timeout=60s crd --all >/dev/null
}

# lab_kubectl RUN ARGS...: the built kubectl, as the lab's admin, inside the
# rack's namespace (the one lab_kube_up ran in).
lab_kubectl() {
  local run=$1; shift
  ip netns exec "$(cat "$run/kube/netns")" \
    "$("$LAB_ROOT/scripts/kubernetes-build" 2>/dev/null | tail -n1)/kubectl" \
    --kubeconfig "$run/kube/admin.kubeconfig" "$@"
}

# lab_mirror_up NS RUN DIR PORT: the rack's own download server on
# 10.89.0.1:PORT (Python's http.server over DIR), standing in for a site's
# mirror: the real-node class's images and Kubernetes binaries come from
# it, never from the internet.
lab_mirror_up() {
  local ns=$1 run=$2 dir=$3 port=$4
  ip netns exec "$ns" python3 -m http.server --bind 10.89.0.1 --directory "$dir" "$port" \
    > "$run/mirror.log" 2>&1 &
  echo $! > "$run/mirror.pid"
  for _ in $(seq 1 100); do
    ip netns exec "$ns" curl -fsI "http://10.89.0.1:$port/" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  lab_log "the mirror did not start; see $run/mirror.log"; return 1
}

# lab_node_mirror RUN IMAGE_DIR KUBE_BIN [PREV_BIN]: fill RUN/mirror with
# the node image (deploy/node-image/build's output) and kubelet/kubeadm of
# KUBE_BIN (the control plane's release), and of PREV_BIN when given.
lab_node_mirror() {
  local run=$1 img=$2 bin=$3 prev=${4:-} f v
  mkdir -p "$run/mirror"
  for f in vmlinuz initrd.img rootfs.img; do ln -sf "$img/$f" "$run/mirror/$f"; done
  if [ -f "$img/node.raw.zst" ]; then ln -sf "$img/node.raw.zst" "$run/mirror/node.raw.zst"
  else ln -sf "$img/node.raw.xz" "$run/mirror/node.raw.xz"; fi
  for f in kubelet kubeadm; do ln -sf "$bin/$f" "$run/mirror/$f"; done
  # The release before (scripts/kubernetes-build-previous), by version:
  # kubelet-vX.Y.Z, kubeadm-vX.Y.Z; a class at that version names them.
  if [ -n "$prev" ]; then
    v=$("$prev/kubeadm" version -o short) || { echo "lab: $prev/kubeadm does not run" >&2; return 1; }
    for f in kubelet kubeadm; do ln -sf "$prev/$f" "$run/mirror/$f-$v"; done
  fi
}

# lab_node_manifests RUN CA_HASH UUID...: the real-node class `lab-node`
# (the Debian node image from the rack's mirror on 10.89.0.1:8081, real
# kubeadm join with the lab cluster's token and CA hash, a bridge CNI
# config) and one Machine with its BMC Secret per VM. LAB_NODE_CLASS_EXTRA
# is appended to the class's spec (indented YAML). LAB_NODE_KUBE_VERSION
# (default v1.34.4) is the class's Kubernetes version; the mirror's
# kubelet-VERSION and kubeadm-VERSION (lab_node_mirror's PREV) serve it when
# present. With LAB_NODE_SET=1 the Machines carry no class and the
# MachineSet `lab-nodes` (one replica per VM, class lab-node, in place one at
# a time; its health gate: the Node Ready for 30 s and kubelet's /healthz,
# which the lab's KubeletConfiguration serves on the node's address,
# answering 200) claims them.
lab_node_manifests() {
  local run=$1 hash=$2; shift 2
  local m="$run/mirror" i=0 disk sum
  local kv=${LAB_NODE_KUBE_VERSION:-v1.34.4} kubelet=kubelet kubeadm=kubeadm
  sum() { sha256sum "$(readlink -f "$m/$1")" | cut -d' ' -f1; }
  disk=node.raw.xz; [ -e "$m/node.raw.zst" ] && disk=node.raw.zst
  if [ -e "$m/kubelet-$kv" ]; then kubelet=kubelet-$kv; kubeadm=kubeadm-$kv; fi
  cat > "$run/class.yaml" <<YAML
apiVersion: v1
kind: Secret
metadata: {name: lab-join-token, namespace: default}
stringData: {token: "abcdef.0123456789abcdef"}
---
apiVersion: metalherd.dev/v1alpha1
kind: MachineClass
metadata: {name: lab-node, namespace: default}
spec:
  image:
    os: debian-coreos
    version: "${LAB_NODE_IMAGE_VERSION:-12.0}"
    kernel: {url: "http://10.89.0.1:8081/vmlinuz", sha256: "$(sum vmlinuz)"}
    initrd: {url: "http://10.89.0.1:8081/initrd.img", sha256: "$(sum initrd.img)"}
    rootfs: {url: "http://10.89.0.1:8081/rootfs.img", sha256: "$(sum rootfs.img)"}
    install: {url: "http://10.89.0.1:8081/$disk", sha256: "$(sum "$disk")"}
  kubernetes:
    version: $kv
    kubelet: {url: "http://10.89.0.1:8081/$kubelet", sha256: "$(sum "$kubelet")"}
    kubeadm: {url: "http://10.89.0.1:8081/$kubeadm", sha256: "$(sum "$kubeadm")"}
  containerRuntime: {name: containerd, version: "1.6.20"}
  join:
    apiServerEndpoint: "10.89.0.1:6443"
    caCertHashes: ["$hash"]
    tokenSecretRef: {name: lab-join-token}
  nodeLabels: {node.kubernetes.io/pool: lab, metalherd.dev/os: debian-coreos}
  nodeTaints: [{key: metalherd.dev/lab, value: "true", effect: PreferNoSchedule}]
  # Kept across installs when the disk has it (the tests give each VM one).
  preservePartitions: [data]
  # An emulated VM on a busy host finds its disks slowly: its initramfs
  # waits up to 10 minutes for the root device (systemd's 90 s default
  # has run out there), as it does for every other unit's start.
  kernelArgs: [systemd.default_timeout_start_sec=600, rd.retry=600]
  files:
  - path: /etc/cni/net.d/10-lab.conflist
    contents: |
      {"cniVersion": "1.0.0", "name": "lab", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isDefaultGateway": true, "ipMasq": true,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]]}}]}
${LAB_NODE_CLASS_EXTRA:-}
YAML
  : > "$run/machines.yaml"
  for uuid in "$@"; do
    i=$((i + 1))
    if [ "${LAB_NODE_SET:-0}" = 1 ]; then lab_machine "$i" "$uuid"
    else lab_machine "$i" "$uuid" lab-node; fi >> "$run/machines.yaml"
  done
  if [ "${LAB_NODE_SET:-0}" = 1 ]; then
    cat >> "$run/machines.yaml" <<YAML
---
apiVersion: metalherd.dev/v1alpha1
kind: MachineSet
metadata: {name: lab-nodes, namespace: default}
spec:
  replicas: $i
  selector: {matchLabels: {rack: lab}}
  template:
    classRef: {name: lab-node}
  updateStrategy:
    type: InPlace
    maxUnavailable: 1
    # A real node's reimage under emulation takes about 9 minutes, close
    # to the 10-minute default, and longer on a busy host.
    progressDeadlineSeconds: 2400
    healthCheck:
      nodeReadySeconds: 30
      httpProbe: {url: "http://{{address}}:10248/healthz", expectedStatus: 200}
YAML
  fi
}
