//! The virtual rack for story tests: the same pieces as `deploy/lab/up`
//! (its lib.sh), driven from Rust: a namespace with the rack's bridge,
//! libvirtd and UEFI QEMU VMs, sushy-tools' libvirt driver as their BMCs,
//! and `metalherd serve` answering DHCP, TFTP and HTTP on the bridge.
//! Everything is stopped and removed on drop. Each lab has its own
//! namespace and libvirtd (with its own state, deploy/lab/lib.sh), so two
//! test binaries may each run one; inside a binary, tests take
//! [`LAB_LOCK`] and share one rack at a time (a VM costs a core).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::proc::{ChildGuard, wait_for};

pub static LAB_LOCK: Mutex<()> = Mutex::new(());

fn lib() -> PathBuf {
    super::repo_root().join("deploy/lab/lib.sh")
}

/// Run `. lib.sh; SCRIPT` with bash; returns stdout, panics with stderr.
pub(crate) fn lab_sh(script: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -euo pipefail; . '{}'; {script}",
            lib().display()
        ))
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "lab: {script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub struct Lab {
    pub ns: String,
    pub run: PathBuf,
    _dir: tempfile::TempDir,
    pub uuids: Vec<String>,
    pub serve: Option<ChildGuard>,
    serve_logs: u32,
    /// Real nodes ([`Lab::up_nodes`]): the Debian node image, the lab's
    /// kubeadm-made cluster and the `lab-node` class.
    nodes: bool,
    /// When [`Lab::declare`] last applied the manifests.
    pub(crate) declared: Mutex<Option<Instant>>,
}

impl Lab {
    /// Start a rack with `n` VMs (powered off), the Redfish emulator and
    /// metalherd; nothing is declared yet.
    pub fn up(n: usize) -> Lab {
        Lab::start(n, None)
    }

    /// [`Lab::up`] with VMs whose firmware enforces Secure Boot with
    /// Microsoft's keys enrolled (lib.sh's `secboot`), as servers ship,
    /// their disks booting through the signed shim and GRUB; sushy-tools
    /// reports their Secure Boot state on each System's SecureBoot.
    pub fn up_secure_boot(n: usize) -> Lab {
        Lab::start_with(n, None, "secboot")
    }

    /// [`Lab::up`] without any DHCP server on the rack's network: metalherd
    /// serves only TFTP and boot HTTP there (virtual media boots, whose
    /// live system takes its Machine's static address).
    pub fn up_without_dhcp(n: usize) -> Lab {
        Lab::start_opts(n, None, "uefi", "LAB_NO_DHCP=1")
    }

    /// [`Lab::up`] on an IPv6-only network: the rack's bridge has
    /// `fd00:89::1/64` and no IPv4 address, the VMs' firmware has its IPv4
    /// stack off, and metalherd serves DHCPv6 (no DHCPv4), router
    /// advertisements with the managed flag and the prefix, TFTP and boot
    /// HTTP on that address (lib.sh's `lab_config` with `LAB_IPV6=1`).
    /// Declare with `LAB_IPV6=1` too: the Machines' addresses are then
    /// `fd00:89::1N/64`.
    pub fn up_ipv6_only(n: usize) -> Lab {
        Lab::start_opts(n, None, "uefi", "LAB_IPV6=1")
    }

    /// `nodes`: real nodes ([`Lab::start_nodes`]) with these disks, else
    /// the test OS.
    pub(crate) fn start(n: usize, nodes: Option<super::lab_nodes::NodeDisks>) -> Lab {
        Lab::start_with(n, nodes, "uefi")
    }

    fn start_with(n: usize, nodes: Option<super::lab_nodes::NodeDisks>, fw: &str) -> Lab {
        Lab::start_opts(n, nodes, fw, "")
    }

    /// `config_env`: variables for lib.sh's `lab_config` (`NAME=VALUE ...`).
    fn start_opts(
        n: usize,
        nodes: Option<super::lab_nodes::NodeDisks>,
        fw: &str,
        config_env: &str,
    ) -> Lab {
        super::require_root();
        for t in [
            "qemu-system-x86_64",
            "virsh",
            "libvirtd",
            "sfdisk",
            "mcopy",
            "syslinux",
        ] {
            super::require_tool(t);
        }
        let venv = super::venv();
        assert!(
            venv.join("bin/sushy-emulator").exists(),
            "sushy-emulator missing in {}: run scripts/setup",
            venv.display()
        );
        let dir = tempfile::Builder::new()
            .prefix("mhlab")
            .tempdir()
            .expect("tempdir");
        let run = dir.path().to_path_buf();
        // A killed test never drops its Lab: its 8 GB of disks go with it.
        super::remove_when_process_exits(&run);
        let ns = super::unique("mhl");
        let mut lab = Lab {
            ns: ns.clone(),
            run: run.clone(),
            _dir: dir,
            uuids: Vec::new(),
            serve: None,
            serve_logs: 0,
            nodes: nodes.is_some(),
            declared: Mutex::new(None),
        };
        let root = super::repo_root();
        if let Some(disks) = nodes {
            lab.start_nodes(n, &venv, disks);
            return lab;
        }
        let kernel = Command::new(root.join("deploy/lab/build-initramfs"))
            .arg(run.join("test-os.cpio.gz"))
            .output()
            .expect("build-initramfs");
        assert!(
            kernel.status.success(),
            "{}",
            String::from_utf8_lossy(&kernel.stderr)
        );
        let kernel = String::from_utf8_lossy(&kernel.stdout).trim().to_string();
        std::fs::copy(&kernel, run.join("vmlinuz")).expect("copy kernel");
        std::fs::create_dir_all(run.join("data")).expect("data dir");
        let r = run.display();
        let ipv6 = config_env.contains("LAB_IPV6=1");
        let cidr = if ipv6 {
            "fd00:89::1/64"
        } else {
            "10.89.0.1/24"
        };
        lab_sh(&format!(
            "lab_netns_up {ns} br0 {cidr}; lab_libvirt_up {ns} '{r}'"
        ));
        for i in 1..=n {
            let disk = run.join(format!("vm{i}.img"));
            let out = Command::new(root.join("deploy/lab/build-disk"))
                .arg(&disk)
                .arg(run.join("vmlinuz"))
                .arg(run.join("test-os.cpio.gz"))
                .arg("8080")
                .args((fw == "secboot").then_some("secure"))
                .output()
                .expect("build-disk");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            // q35 (the Secure Boot builds need SMM) has no IDE bus.
            let bus = if fw == "secboot" {
                "LAB_VM_DISK_BUS=virtio "
            } else {
                ""
            };
            let v6 = if ipv6 { "LAB_VM_IPV6_ONLY=1 " } else { "" };
            let uuid = lab_sh(&format!(
                "{bus}{v6}lab_define_vm '{r}' {ns}-vm{i} {} '{}' br0 {fw}",
                mac(i),
                disk.display()
            ));
            lab.uuids.push(uuid.trim().to_string());
        }
        let extra = super::lab_config::sushy_extra(fw);
        std::fs::write(run.join("sushy-extra.conf"), extra).expect("sushy-extra.conf");
        lab_sh(&format!(
            "LAB_SUSHY_EXTRA=\"$(cat '{r}/sushy-extra.conf')\" lab_sushy_up {ns} '{r}' 8000 '{}'",
            venv.display()
        ));
        lab_sh(&format!(
            "{config_env} lab_config '{r}' br0 '{}'",
            root.display()
        ));
        lab.start_metalherd();
        lab
    }

    /// Start (or restart) `metalherd serve` in the rack's namespace.
    pub fn start_metalherd(&mut self) {
        self.serve_logs += 1;
        let log = self.run.join(format!("metalherd-{}.log", self.serve_logs));
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns])
            .arg(super::metalherd_bin())
            .arg("--data-dir")
            .arg(self.run.join("data"))
            .args(["serve", "--listen", "127.0.0.1:7080", "--config"])
            .arg(self.run.join("config.yaml"))
            .env("METALHERD_LOG", "info");
        self.serve = Some(ChildGuard::spawn("metalherd serve", &mut cmd, &log));
        let up = wait_for(Duration::from_secs(30), || {
            let ca = self.run.join("data/ca.crt");
            let ca = ca.to_string_lossy();
            let o = self.cmd_in_ns(
                "curl",
                &["-fs", "--cacert", &ca, "https://127.0.0.1:7080/healthz"],
            );
            o.status.success().then_some(())
        });
        assert!(
            up.is_some(),
            "metalherd did not start:\n{}",
            self.metalherd_log()
        );
    }

    /// Merge `yaml` (a mapping, e.g. `bmc: {quirks: [...]}`) into the
    /// lab's config file, section by section; takes effect at the next
    /// [`Lab::start_metalherd`].
    pub fn merge_config(&self, yaml: &str) {
        let path = self.run.join("config.yaml");
        let mut config: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(&path).expect("config.yaml"))
                .expect("config.yaml is YAML");
        let extra: serde_yaml::Value = serde_yaml::from_str(yaml).expect("config fragment");
        super::lab_config::merge_yaml(&mut config, extra);
        std::fs::write(&path, serde_yaml::to_string(&config).expect("yaml")).expect("write config");
    }

    /// SIGKILL metalherd (no chance to clean up).
    /// Start etcd and kube-apiserver in the rack with the CRDs installed
    /// (lib.sh's `lab_kube_up`, as `deploy/lab/up --kubernetes` does);
    /// returns the admin kubeconfig. Stopped by the lab's teardown.
    pub fn kube_up(&self) -> PathBuf {
        lab_sh(&format!("lab_kube_up {} '{}'", self.ns, self.run.display()));
        self.run.join("kube/admin.kubeconfig")
    }

    /// The built kubectl as the lab's admin, inside the rack (after
    /// [`Lab::kube_up`]): (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(super::control_plane::kube_bin("kubectl"))
            .arg("--kubeconfig")
            .arg(self.run.join("kube/admin.kubeconfig"))
            .env("HOME", &self.run)
            .args(args)
            .output()
            .expect("kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn kill_metalherd(&mut self) {
        if let Some(mut g) = self.serve.take() {
            g.kill9();
        }
    }

    pub fn metalherd_log(&self) -> String {
        let mut s = String::new();
        for i in 1..=self.serve_logs {
            s.push_str(
                &std::fs::read_to_string(self.run.join(format!("metalherd-{i}.log")))
                    .unwrap_or_default(),
            );
        }
        s
    }

    /// The disk image of VM `i` (raw; see `lab_disk` to read it).
    pub fn disk(&self, i: usize) -> PathBuf {
        self.run.join(format!("vm{i}.img"))
    }

    pub fn console(&self, i: usize) -> String {
        let p = self.run.join(format!("{}-vm{i}.console", self.ns));
        String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned()
    }

    pub fn cmd_in_ns(&self, prog: &str, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns, prog])
            .args(args)
            .output()
            .expect("ip netns exec")
    }

    /// The metalherd CLI against the rack's server.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        self.cli_command(args).output().expect("metalherd cli")
    }

    /// The metalherd CLI against the rack's server, not started yet.
    pub fn cli_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns])
            .arg(super::metalherd_bin())
            .arg("--data-dir")
            .arg(self.run.join("data"))
            .args(args);
        c
    }

    pub fn cli_ok(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        assert!(
            o.status.success(),
            "metalherd {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Write the lab's class and one Machine per VM (lib.sh's manifests),
    /// with `env` overriding the class's versions, and apply them.
    pub fn declare(&self, env: &[(&str, &str)]) {
        *self.declared.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.write_manifests(env);
        let r = self.run.display();
        self.cli_ok(&["apply", "-f", &format!("{r}/class.yaml")]);
        self.cli_ok(&["apply", "-f", &format!("{r}/machines.yaml")]);
    }

    /// Write `class.yaml` (the join Secret and the classes) and
    /// `machines.yaml` (one Machine and BMC Secret per VM) into the run
    /// directory, with `env` overriding the class's versions; apply nothing.
    pub fn write_manifests(&self, env: &[(&str, &str)]) {
        let r = self.run.display();
        let mut script = String::new();
        for (k, v) in env {
            script.push_str(&format!("export {k}='{v}'; "));
        }
        if self.nodes {
            script.push_str(&format!(
                "lab_node_manifests '{r}' \"$(cat '{r}/kube/ca-hash')\" {}",
                self.uuids.join(" ")
            ));
        } else {
            script.push_str(&format!(
                "lab_manifests '{r}' '{r}/vmlinuz' '{r}/test-os.cpio.gz' {}",
                self.uuids.join(" ")
            ));
        }
        lab_sh(&script);
    }

    /// The lab's classes and one Machine per VM with no class: each stops
    /// at Available, a pool for a MachineSet to claim (its selector:
    /// `rack: lab`).
    pub fn declare_pool(&self, env: &[(&str, &str)]) {
        self.write_pool(env, &[]);
        let r = self.run.display();
        self.cli_ok(&["apply", "-f", &format!("{r}/class.yaml")]);
        self.cli_ok(&["apply", "-f", &format!("{r}/machines.yaml")]);
    }

    /// A Machine as JSON, or None when it does not exist.
    pub fn machine(&self, name: &str) -> Option<Value> {
        let o = self.cli(&["get", "machine", name, "-o", "json"]);
        if !o.status.success() {
            return None;
        }
        serde_json::from_slice(&o.stdout).ok()
    }

    pub fn phase(&self, name: &str) -> Option<String> {
        self.machine(name)?
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// Poll until `name` reaches `phase`, collecting every phase seen on the
    /// way (in order, without repeats). Panics with the story so far and
    /// the logs when the deadline passes.
    pub fn wait_phase(&self, name: &str, phase: &str, timeout: Duration, seen: &mut Vec<String>) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(p) = self.phase(name) {
                if seen.last() != Some(&p) {
                    eprintln!("lab: {name} -> {p} ({} s since declared)", self.since());
                    seen.push(p.clone());
                }
                if p == phase {
                    return;
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "{name} did not reach {phase} within {timeout:?}; phases seen {seen:?}\nmachine: {}\nconsole:\n{}\nmetalherd log (tail):\n{}",
                    self.machine(name)
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                    tail(
                        &self.console(
                            name.strip_prefix("vm")
                                .and_then(|i| i.parse().ok())
                                .unwrap_or(1)
                        ),
                        3000
                    ),
                    tail(&self.metalherd_log(), 6000)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The server's `/metrics` text.
    pub fn metrics(&self) -> String {
        self.api_get("/metrics")
    }

    /// An authorized GET of the API (empty on failure).
    pub fn api_get(&self, path: &str) -> String {
        let token = std::fs::read_to_string(self.run.join("data/api-token")).unwrap_or_default();
        let ca = self.run.join("data/ca.crt");
        let o = self.cmd_in_ns(
            "curl",
            &[
                "-sf",
                "--cacert",
                &ca.to_string_lossy(),
                "-H",
                &format!("Authorization: Bearer {}", token.trim()),
                &format!("https://127.0.0.1:7080{path}"),
            ],
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// A metric's value (first sample whose line starts with `name`).
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics()
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// Number of requests with `method` whose line in the Redfish
    /// emulator's log contains `path`.
    pub fn bmc_calls(&self, method: &str, path: &str) -> usize {
        std::fs::read_to_string(self.run.join("sushy.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&format!("\"{method} ")) && l.contains(path))
            .count()
    }

    /// Number of requests like `bmc_calls` the emulator answered with a
    /// 2xx (its log line ends `HTTP/1.1" 201 -`); the others are printed.
    pub fn bmc_calls_accepted(&self, method: &str, path: &str) -> usize {
        let log = std::fs::read_to_string(self.run.join("sushy.log")).unwrap_or_default();
        let calls = log
            .lines()
            .filter(|l| l.contains(&format!("\"{method} ")) && l.contains(path));
        let (ok, refused): (Vec<&str>, Vec<&str>) = calls.partition(|l| {
            l.rsplit_once("\" ")
                .is_some_and(|(_, status)| status.starts_with('2'))
        });
        for l in refused {
            eprintln!("lab: the BMC refused: {l}");
        }
        ok.len()
    }

    /// Number of power actions the Redfish emulator received (from its log).
    pub fn reset_calls(&self) -> usize {
        self.bmc_calls("POST", "ComputerSystem.Reset")
    }

    /// `virsh ARGS` against the lab's libvirt (domains are `{ns}-vmN`).
    pub fn virsh(&self, args: &[&str]) -> String {
        let r = self.run.display();
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". '{}'; lab_virsh '{r}' {}",
                lib().display(),
                quoted.join(" ")
            ))
            .output()
            .expect("virsh");
        assert!(
            out.status.success(),
            "virsh {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether libvirt reports the VM running.
    pub fn vm_running(&self, i: usize) -> bool {
        let r = self.run.display();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". '{}'; lab_virsh '{r}' domstate {}-vm{i}",
                lib().display(),
                self.ns
            ))
            .output()
            .expect("virsh");
        String::from_utf8_lossy(&out.stdout).contains("running")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.kill_metalherd();
        let _ = Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". '{}'; lab_down {} '{}'",
                lib().display(),
                self.ns,
                self.run.display()
            ))
            .status();
    }
}

/// MAC of lab VM `i` (1-based).
pub fn mac(i: usize) -> String {
    format!("52:54:00:4d:48:{i:02x}")
}

pub(crate) fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let mut i = start;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// Steps of the machine's boot history, in order.
pub fn boot_steps(m: &Value) -> Vec<String> {
    m.pointer("/status/bootHistory")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| e.get("step").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}
