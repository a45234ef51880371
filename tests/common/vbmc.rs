//! virtualbmc (IPMI over LAN for libvirt domains) on a virtual-rack VM:
//! `vbmcd` runs inside the rack's namespace with its own config and state
//! directory, and one vBMC answers RMCP+ on 127.0.0.1:[`PORT`] there for
//! the domain, talking to the rack's libvirtd. Stopped (by its PID) on drop.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::lab::Lab;
use super::proc::{ChildGuard, wait_for};

pub const PORT: u16 = 6230;
pub const USER: &str = "admin";
pub const PASSWORD: &str = "vbmc-pass";

pub struct Vbmc {
    ns: String,
    conf: PathBuf,
    domain: String,
    daemon: Option<ChildGuard>,
    _dir: tempfile::TempDir,
}

impl Vbmc {
    /// Start vbmcd in `lab`'s namespace and a vBMC for VM `i`.
    pub fn start(lab: &Lab, i: usize) -> Vbmc {
        let venv = super::venv();
        for bin in ["vbmc", "vbmcd"] {
            assert!(
                venv.join("bin").join(bin).exists(),
                "{bin} missing in {}: run scripts/setup (virtualbmc)",
                venv.display()
            );
        }
        super::require_tool("ipmitool");
        let dir = tempfile::Builder::new()
            .prefix("vbmc")
            .tempdir()
            .expect("tempdir");
        let d = dir.path();
        let conf = d.join("virtualbmc.conf");
        std::fs::write(
            &conf,
            format!(
                "[default]\nconfig_dir = {0}/state\npid_file = {0}/vbmcd.pid\nserver_port = 50891\n\n[log]\nlogfile = {0}/vbmcd.log\ndebug = true\n",
                d.display()
            ),
        )
        .expect("vbmc config");
        std::fs::create_dir_all(d.join("state")).expect("vbmc state dir");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &lab.ns])
            .arg(venv.join("bin/vbmcd"))
            .arg("--foreground")
            .env("VIRTUALBMC_CONFIG", &conf);
        let daemon = ChildGuard::spawn("vbmcd", &mut cmd, &d.join("vbmcd.out"));
        let v = Vbmc {
            ns: lab.ns.clone(),
            conf,
            domain: format!("{}-vm{i}", lab.ns),
            daemon: Some(daemon),
            _dir: dir,
        };
        let uri = format!(
            "qemu:///system?socket={}/libvirt/libvirt-sock",
            lab.run.display()
        );
        let port = PORT.to_string();
        let domain = v.domain.clone();
        let added = wait_for(Duration::from_secs(30), || {
            v.vbmc(&[
                "add",
                &domain,
                "--port",
                &port,
                "--address",
                "127.0.0.1",
                "--username",
                USER,
                "--password",
                PASSWORD,
                "--libvirt-uri",
                &uri,
            ])
            .then_some(())
        });
        assert!(added.is_some(), "vbmc add failed:\n{}", v.log());
        assert!(v.vbmc(&["start", &domain]), "vbmc start:\n{}", v.log());
        let up = wait_for(Duration::from_secs(30), || {
            let o = Command::new("ip")
                .args(["netns", "exec", &v.ns, "ipmitool", "-I", "lanplus"])
                .args(["-H", "127.0.0.1", "-p", &port, "-U", USER, "-P", PASSWORD])
                .args(["-C", "3", "power", "status"])
                .output()
                .expect("ipmitool");
            o.status.success().then_some(())
        });
        assert!(up.is_some(), "the vBMC does not answer IPMI:\n{}", v.log());
        v
    }

    pub fn address(&self) -> String {
        format!("ipmi://127.0.0.1:{PORT}")
    }

    fn vbmc(&self, args: &[&str]) -> bool {
        Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(super::venv().join("bin/vbmc"))
            .args(args)
            .env("VIRTUALBMC_CONFIG", &self.conf)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    pub fn log(&self) -> String {
        let d = self.conf.parent().map(PathBuf::from).unwrap_or_default();
        let mut s = std::fs::read_to_string(d.join("vbmcd.log")).unwrap_or_default();
        s.push_str(&std::fs::read_to_string(d.join("vbmcd.out")).unwrap_or_default());
        s
    }
}

impl Drop for Vbmc {
    fn drop(&mut self) {
        let domain = self.domain.clone();
        let _ = self.vbmc(&["stop", &domain]);
        if let Some(mut d) = self.daemon.take() {
            d.terminate(Duration::from_secs(5));
        }
    }
}
