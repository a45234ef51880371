# Shared functions of the virtual rack (sourced by deploy/lab/up and tests).
# Everything runs inside one network namespace: a bridge that is the
# provisioning network, libvirtd and its VMs, the Redfish emulator and
# metalherd. Nothing leaves the namespace.

LAB_QEMU_CONF=/etc/libvirt/qemu.conf
LAB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

lab_log() { echo "lab: $*" >&2; }

# lab_netns_up NS BRIDGE CIDR
lab_netns_up() {
  local ns=$1 br=$2 cidr=$3
  ip netns add "$ns"
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip link add "$br" type bridge
  ip netns exec "$ns" ip link set "$br" type bridge forward_delay 0 stp_state 0
  ip netns exec "$ns" ip addr add "$cidr" dev "$br"
  ip netns exec "$ns" ip link set "$br" up
}

# Configure libvirt's QEMU driver to run without systemd, cgroups or
# security drivers (backing up the original once), then start libvirtd
# inside the namespace with its sockets under RUN.
# lab_libvirt_up NS RUN
lab_libvirt_up() {
  local ns=$1 run=$2
  if [ ! -f "$run/qemu.conf.orig" ]; then
    cp "$LAB_QEMU_CONF" "$run/qemu.conf.orig"
  fi
  cat > "$LAB_QEMU_CONF" <<CONF
security_driver = "none"
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
cgroup_controllers = []
namespaces = []
stdio_handler = "file"
CONF
  mkdir -p "$run/libvirt"
  cat > "$run/libvirtd.conf" <<CONF
unix_sock_dir = "$run/libvirt"
unix_sock_group = "root"
auth_unix_rw = "none"
auth_unix_ro = "none"
listen_tls = 0
listen_tcp = 0
CONF
  ip netns exec "$ns" /usr/sbin/libvirtd --config "$run/libvirtd.conf" --pid-file "$run/libvirtd.pid" > "$run/libvirtd.log" 2>&1 &
  echo $! > "$run/libvirtd.launcher.pid"
  for _ in $(seq 1 100); do
    [ -S "$run/libvirt/libvirt-sock" ] && return 0
    sleep 0.1
  done
  lab_log "libvirtd did not start (is another libvirtd running?):"; tail -n 20 "$run/libvirtd.log" >&2; return 1
}

lab_virsh() { local run=$1; shift; virsh -c "qemu:///system?socket=$run/libvirt/libvirt-sock" "$@"; }

# lab_define_vm RUN NAME MAC DISK BRIDGE [uefi|bios]
lab_define_vm() {
  local run=$1 name=$2 mac=$3 disk=$4 br=$5 fw=${6:-uefi}
  local loader="" nic="<model type='e1000'/>"
  if [ "$fw" = uefi ]; then
    # OVMF's own virtio-net driver and PXE client (no iPXE option ROM), so
    # the firmware fetches iPXE over TFTP as real UEFI servers do.
    nic="<model type='virtio'/><rom enabled='no'/>"
    cp /usr/share/OVMF/OVMF_VARS_4M.fd "$run/$name.vars.fd"
    loader="<loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader><nvram>$run/$name.vars.fd</nvram>"
  fi
  cat > "$run/$name.xml" <<XML
<domain type='qemu'>
  <name>$name</name>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type>$loader<boot dev='hd'/></os>
  <features><acpi/></features>
  <on_reboot>restart</on_reboot>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='$disk'/>
      <target dev='hda' bus='ide'/>
    </disk>
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
  cat > "$run/sushy.conf" <<CONF
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_LISTEN_PORT = $port
SUSHY_EMULATOR_LIBVIRT_URI = 'qemu:///system?socket=$run/libvirt/libvirt-sock'
SUSHY_EMULATOR_BOOT_LOADER_MAP = {'UEFI': {'x86_64': '/usr/share/OVMF/OVMF_CODE_4M.fd'}, 'Legacy': {'x86_64': None}}
CONF
  ip netns exec "$ns" "$venv/bin/sushy-emulator" --config "$run/sushy.conf" > "$run/sushy.log" 2>&1 &
  echo $! > "$run/sushy.pid"
  for _ in $(seq 1 150); do
    ip netns exec "$ns" curl -fs "http://127.0.0.1:$port/redfish/v1/" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  lab_log "sushy-emulator did not start; see $run/sushy.log"; return 1
}

# lab_down NS RUN: stop everything the lab started (by PID) and restore qemu.conf.
lab_down() {
  local ns=$1 run=$2
  if [ -S "$run/libvirt/libvirt-sock" ]; then
    for d in $(lab_virsh "$run" list --all --name 2>/dev/null); do
      lab_virsh "$run" destroy "$d" >/dev/null 2>&1 || true
      lab_virsh "$run" undefine --nvram "$d" >/dev/null 2>&1 || lab_virsh "$run" undefine "$d" >/dev/null 2>&1 || true
    done
  fi
  for p in sushy metalherd metalherd-b kube-apiserver etcd libvirtd; do
    [ -f "$run/$p.pid" ] && kill "$(cat "$run/$p.pid")" 2>/dev/null || true
  done
  sleep 0.5
  if ip netns list | grep -qw "$ns"; then
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  fi
  if [ -f "$run/qemu.conf.orig" ]; then
    cp "$run/qemu.conf.orig" "$LAB_QEMU_CONF"
  fi
}

# lab_config RUN BRIDGE: metalherd's config for the lab's boot network
# (10.89.0.0/24 exists only inside the lab namespace).
lab_config() {
  local run=$1 br=$2 root=$3
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
tftp:
  listen: 10.89.0.1:69
  root: $root/boot-assets
boot:
  listen: 10.89.0.1:8080
  assetsDir: $root/boot-assets
  kernelArgs: [console=ttyS0]
  routerAdvertisement: {interface: $br}
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
    cat >> "$run/machines.yaml" <<YAML
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
  network: {address: 10.89.0.$((10 + i))/24, gateway: 10.89.0.1, hostname: vm$i}
  classRef: {name: $class}
YAML
  done
}

# lab_kube_up NS RUN: a real Kubernetes control plane for the rack: etcd
# and kube-apiserver (the release scripts/kubernetes-build builds) in the
# rack's namespace, the API on port 6443 of every address there (loopback
# and 10.89.0.1), PKI, an admin token and an audit log under RUN/kube,
# metalherd's CRDs installed. Writes the admin kubeconfig to
# RUN/kube/admin.kubeconfig.
lab_kube_up() {
  local ns=$1 run=$2 k="$2/kube" bin token i
  bin=$("$LAB_ROOT/scripts/kubernetes-build" | tail -n1)
  # The admin token, the keys and the kubeconfig are for root alone.
  mkdir -p -m 0700 "$k"
  mkdir -p "$k/pki"
  echo "$ns" > "$k/netns"
  (
    cd "$k/pki"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
      -subj /CN=metalherd-lab-kubernetes-ca -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=kube-apiserver \
      -keyout apiserver.key -out apiserver.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:10.89.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' > apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out sa.key
    openssl pkey -in sa.key -pubout -out sa.pub
  )
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$token,lab-admin,lab-admin,\"system:masters\"" > "$k/tokens.csv"
  printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n' > "$k/audit-policy.yaml"
  ip netns exec "$ns" "$bin/etcd" --name lab --data-dir "$k/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster lab=http://127.0.0.1:2380 --log-level warn > "$k/etcd.log" 2>&1 &
  echo $! > "$run/etcd.pid"
  ip netns exec "$ns" "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --bind-address 0.0.0.0 --advertise-address 10.89.0.1 --secure-port 6443 \
    --tls-cert-file "$k/pki/apiserver.crt" --tls-private-key-file "$k/pki/apiserver.key" \
    --client-ca-file "$k/pki/ca.crt" --token-auth-file "$k/tokens.csv" \
    --service-account-key-file "$k/pki/sa.pub" --service-account-signing-key-file "$k/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.96.0.0/24 --authorization-mode Node,RBAC \
    --enable-bootstrap-token-auth --audit-policy-file "$k/audit-policy.yaml" \
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
  user: {token: "$token"}
contexts:
- name: lab
  context: {cluster: lab, user: lab-admin, namespace: default}
current-context: lab
KC
  for i in $(seq 1 300); do
    if ip netns exec "$ns" curl -fs --cacert "$k/pki/ca.crt" -H "Authorization: Bearer $token" \
      https://127.0.0.1:6443/readyz >/dev/null 2>&1; then
      break
    fi
    kill -0 "$(cat "$run/kube-apiserver.pid")" 2>/dev/null || { tail -n 20 "$k/kube-apiserver.log" >&2; return 1; }
    [ "$i" -lt 300 ] || { lab_log "kube-apiserver did not become ready: $k/kube-apiserver.log"; return 1; }
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
