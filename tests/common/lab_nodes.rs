//! Real nodes on the virtual rack ([`Lab::up_nodes`]): VMs with a blank
//! disk (a `data` partition the class preserves), the Debian node image and
//! kubelet/kubeadm on the rack's mirror, the lab's kubeadm-made cluster as
//! metalherd's target cluster and the `lab-node` class.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::lab::{Lab, lab_sh, mac, tail};

/// How long a real node may take from power-on to Node Ready under
/// emulation (live boot, install, first boot, kubeadm join).
pub const NODE_READY_TIMEOUT: Duration = Duration::from_secs(2400);

/// vCPUs of VM 1 when set ([`Lab::up_nodes_control_plane_first`]).
static FIRST_VM_CPUS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The node image's directory: METALHERD_NODE_IMAGE (an image directory
/// built earlier, its README), otherwise deploy/node-image/build's output,
/// which it returns at once from its cache when the inputs did not change.
pub fn node_image() -> std::path::PathBuf {
    let image = match std::env::var("METALHERD_NODE_IMAGE") {
        Ok(dir) => dir,
        Err(_) => {
            let build = Command::new(super::repo_root().join("deploy/node-image/build"))
                .output()
                .expect("deploy/node-image/build");
            assert!(
                build.status.success(),
                "deploy/node-image/build failed:\n{}",
                tail(&String::from_utf8_lossy(&build.stderr), 4000)
            );
            String::from_utf8_lossy(&build.stdout)
                .lines()
                .last()
                .unwrap_or_default()
                .trim()
                .to_string()
        }
    };
    assert!(
        Path::new(&image).join("vmlinuz").exists(),
        "the node image build printed no output directory: {image:?}"
    );
    image.into()
}

impl Lab {
    /// A rack of `n` real nodes: VMs with 2 GiB, 1 vCPU and a blank 8 GiB
    /// virtio disk, the node image (deploy/node-image/build, cached) and
    /// kubelet/kubeadm on the rack's mirror (10.89.0.1:8081), the lab's
    /// kubeadm-made cluster (lib.sh's `lab_kube_up`) as metalherd's target
    /// cluster, and metalherd. Nothing is declared yet.
    pub fn up_nodes(n: usize) -> Lab {
        Lab::start(n, Some(NodeDisks::One))
    }

    /// [`Lab::up_nodes`] whose first VM has two vCPUs, for a control
    /// plane (kubeadm's preflight asks for two; an emulated kube-apiserver
    /// and etcd on one starve while the other VMs install beside them).
    pub fn up_nodes_control_plane_first(n: usize) -> Lab {
        FIRST_VM_CPUS.store(2, std::sync::atomic::Ordering::SeqCst);
        Lab::start(n, Some(NodeDisks::One))
    }

    /// [`Lab::up_nodes`] whose VMs also have a smaller second disk, the
    /// one an install without hints would pick ([`DECOY_SERIAL`]).
    pub fn up_nodes_with_decoy(n: usize) -> Lab {
        Lab::start(n, Some(NodeDisks::WithDecoy))
    }

    pub(crate) fn start_nodes(&mut self, n: usize, venv: &Path, disks: NodeDisks) {
        let root = super::repo_root();
        let image = node_image().display().to_string();
        std::fs::create_dir_all(self.run.join("data")).expect("data dir");
        let (ns, r) = (self.ns.clone(), self.run.display().to_string());
        lab_sh(&format!(
            "lab_netns_up {ns} br0 10.89.0.1/24; lab_libvirt_up {ns} '{r}'"
        ));
        for i in 1..=n {
            let disk = self.run.join(format!("vm{i}.img"));
            data_partition(&disk);
            let mut second = String::new();
            if disks == NodeDisks::WithDecoy {
                let decoy = self.decoy(i);
                decoy_disk(&decoy);
                second = format!(
                    "LAB_VM_DISK2='{}' LAB_VM_DISK2_SERIAL={DECOY_SERIAL}",
                    decoy.display()
                );
            }
            let cpus = match FIRST_VM_CPUS.load(std::sync::atomic::Ordering::SeqCst) {
                c if i == 1 && c > 0 => c.to_string(),
                _ => "${LAB_VM_CPUS:-1}".to_string(),
            };
            let uuid = lab_sh(&format!(
                "LAB_VM_MEMORY=${{LAB_VM_MEMORY:-2048}} LAB_VM_CPUS={cpus} LAB_VM_DISK_BUS=virtio LAB_VM_ON_REBOOT=destroy \
                 LAB_VM_DISK_SERIAL={ROOT_SERIAL} {second} \
                 lab_define_vm '{r}' {ns}-vm{i} {} '{}' br0 uefi",
                mac(i),
                disk.display()
            ));
            self.uuids.push(uuid.trim().to_string());
        }
        let raid = disks == NodeDisks::WithDecoy;
        let uuids = self.uuids.join(" ");
        let extra = if raid {
            format!("LAB_SUSHY_EXTRA=\"$(lab_raid_sushy_conf {uuids})\" ")
        } else {
            String::new()
        };
        lab_sh(&format!(
            "{extra}lab_sushy_up {ns} '{r}' 8000 '{}'",
            venv.display()
        ));
        if raid {
            let pairs: Vec<String> = (1..=n)
                .map(|i| format!("{ns}-vm{i}={}", self.uuids[i - 1]))
                .collect();
            lab_sh(&format!("lab_raid_up {ns} '{r}' 8000 {}", pairs.join(" ")));
        }
        lab_sh(&format!("lab_config '{r}' br0 '{}'", root.display()));
        let kubeconfig = self.kube_up();
        super::control_plane::kube_bin("kubelet");
        let bin = super::control_plane::kube_bin_dir();
        let prev = super::control_plane::previous_kube_bin_dir();
        lab_sh(&format!(
            "lab_node_mirror '{r}' '{image}' '{}' '{}'; lab_mirror_up {ns} '{r}' '{r}/mirror' 8081",
            bin.display(),
            prev.display()
        ));
        self.merge_config(&format!(
            "controller: {{kubeconfig: '{}', installDeadlineSeconds: 2400, joinDeadlineSeconds: 1800}}",
            kubeconfig.display()
        ));
        self.start_metalherd();
    }

    /// VM `i`'s RAID volume disks ([`NodeDisks::WithDecoy`]), by name.
    pub fn raid_disks(&self, i: usize) -> Vec<std::path::PathBuf> {
        let prefix = format!("{}-vm{i}-", self.ns);
        let mut found: Vec<_> = std::fs::read_dir(self.run.join("raid"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .and_then(|f| f.to_str())
                            .is_some_and(|f| f.starts_with(&prefix))
                    })
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        found
    }

    /// VM `i`'s decoy disk ([`Lab::up_nodes_with_decoy`]).
    pub fn decoy(&self, i: usize) -> std::path::PathBuf {
        self.run.join(format!("vm{i}-decoy.img"))
    }

    /// Write the lab's manifests (`env` as for `write_manifests`) with
    /// every Machine's `classRef` taken out, so each stops at Available:
    /// a pool for a MachineSet or Cluster API to claim (selector `rack:
    /// lab`). `labels` adds a label to a Machine by name (`("vm1", "role:
    /// control-plane")`). The caller applies class.yaml and machines.yaml.
    pub fn write_pool(&self, env: &[(&str, &str)], labels: &[(&str, &str)]) {
        self.write_manifests(env);
        let machines = self.run.join("machines.yaml");
        let pool: String = std::fs::read_to_string(&machines)
            .expect("machines.yaml")
            .lines()
            .filter(|l| !l.trim_start().starts_with("classRef:"))
            .map(|l| {
                let mut l = l.to_string();
                for (name, label) in labels {
                    let from =
                        format!("{{name: {name}, namespace: default, labels: {{rack: lab}}}}");
                    let to = format!(
                        "{{name: {name}, namespace: default, labels: {{rack: lab, {label}}}}}"
                    );
                    l = l.replace(&from, &to);
                }
                l + "\n"
            })
            .collect();
        for (name, label) in labels {
            assert!(
                pool.contains(&format!("{{rack: lab, {label}}}")),
                "{name} not labelled in:\n{pool}"
            );
        }
        std::fs::write(&machines, pool).expect("write machines.yaml");
    }

    /// Seconds since the lab's Machines were last declared.
    pub fn since(&self) -> u64 {
        self.declared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|t| t.elapsed().as_secs())
            .unwrap_or_default()
    }

    /// HTTP codes kube-apiserver answered to evictions of Pod `pod`, from
    /// the lab's audit log, in order.
    pub fn evictions(&self, pod: &str) -> Vec<u64> {
        std::fs::read_to_string(self.run.join("kube/audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| {
                e["objectRef"]["subresource"] == "eviction"
                    && e["objectRef"]["name"] == pod
                    && e["stage"] == "ResponseComplete"
            })
            .filter_map(|e| e["responseStatus"]["code"].as_u64())
            .collect()
    }
}

/// The disks of a real node's VM.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NodeDisks {
    /// One 8 GiB disk, `/dev/vda`, serial [`ROOT_SERIAL`].
    One,
    /// And a 4 GiB `/dev/vdb`, serial [`DECOY_SERIAL`], holding a GPT
    /// with one partition `decoy` that starts with [`DECOY_MARKER`]:
    /// smaller, so the installer's default (the smallest disk) would pick
    /// it; only hints lead to `/dev/vda`. And a RAID controller: its
    /// Redfish Storage (one 16 GiB drive) in sushy-tools, and each volume
    /// made there attached to the VM as a disk of the volume's size
    /// (lib.sh's `lab_raid_up`; its disks are [`Lab::raid_disks`]).
    WithDecoy,
}

/// The serial number of every node VM's 8 GiB disk (`/dev/vda`).
pub const ROOT_SERIAL: &str = "node-root-8g";

/// The serial number of the decoy disk ([`NodeDisks::WithDecoy`]).
pub const DECOY_SERIAL: &str = "decoy-4g";

/// The marker at the start of the decoy disk's partition.
pub const DECOY_MARKER: &str = "MHDECOY no install or wipe may touch this disk";

/// Where the decoy's partition starts (1 MiB).
pub const DECOY_START: u64 = 2048;

/// A blank 4 GiB disk whose GPT holds one partition `decoy` starting with
/// [`DECOY_MARKER`].
fn decoy_disk(disk: &Path) {
    partitioned(disk, 4 << 30, DECOY_START, "decoy", DECOY_MARKER);
}

/// Where a real node's disk (8 GiB) has its `data` partition: from 6 GiB
/// to the end, beyond any OS image; `lab-node` preserves it.
pub const NODE_DATA_START: u64 = 6 << 21;

/// The marker [`data_partition`] writes at the start of `data`.
pub const NODE_DATA_MARKER: &str = "MHDATA written before the first install";

/// A blank 8 GiB disk whose GPT holds only a `data` partition (from
/// [`NODE_DATA_START`]) starting with [`NODE_DATA_MARKER`]: the installer
/// must keep it across installs.
fn data_partition(disk: &Path) {
    partitioned(disk, 8 << 30, NODE_DATA_START, "data", NODE_DATA_MARKER);
}

/// A sparse disk image of `size` bytes with a GPT holding one partition
/// `name` from sector `start` to the end, `marker` at its start.
fn partitioned(disk: &Path, size: u64, start: u64, name: &str, marker: &str) {
    use std::io::{Seek, SeekFrom, Write};
    let f = std::fs::File::create(disk).expect("disk");
    f.set_len(size).expect("sparse disk");
    drop(f);
    let mut sfdisk = Command::new("sfdisk")
        .args(["-q", "--no-reread"])
        .arg(disk)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("sfdisk");
    sfdisk
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("label: gpt\nstart={start}, name=\"{name}\"\n").as_bytes())
        .expect("sfdisk script");
    assert!(sfdisk.wait().expect("sfdisk").success(), "sfdisk failed");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(disk)
        .expect("disk");
    f.seek(SeekFrom::Start(start * 512)).expect("seek");
    f.write_all(format!("{marker}\n").as_bytes())
        .expect("marker");
}
