//! IPMI BMC emulators for the driver tests, started on 127.0.0.1 with free
//! UDP ports and killed on drop: OpenIPMI's `ipmi_sim` (config from
//! tests/fixtures/ipmi_sim, chassis power and boot device kept by
//! chassis.sh in a temp dir, with file switches for faults) and pyghmi's
//! fake BMC (tests/fixtures/pyghmi/bmc.py, suite 3, optionally 17). Plus
//! `ipmitool` as the reference client and a UDP proxy that garbles,
//! duplicates or drops replies.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::proc::{ChildGuard, wait_for};
use super::{repo_root, require_tool, venv};

pub const USER: &str = "admin";
pub const PASSWORD: &str = "password";

/// A free UDP port on loopback (bind 0 and release).
pub fn free_udp_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    s.local_addr().expect("addr").port()
}

/// Run ipmitool -I lanplus against 127.0.0.1:port; (success, stdout+stderr).
pub fn ipmitool(port: u16, suite: u8, password: &str, args: &[&str]) -> (bool, String) {
    let tool = require_tool("ipmitool");
    let out = Command::new(tool)
        .args(["-I", "lanplus", "-H", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", USER, "-P", password, "-C", &suite.to_string()])
        .args(["-N", "1", "-R", "3"])
        .args(args)
        .output()
        .expect("run ipmitool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// ipmitool's `chassis bootparam get 5` data, e.g. "8004000000".
pub fn ipmitool_boot_flags(port: u16, suite: u8) -> String {
    let (ok, out) = ipmitool(port, suite, PASSWORD, &["chassis", "bootparam", "get", "5"]);
    assert!(ok, "ipmitool bootparam get 5 failed: {out}");
    out.lines()
        .find_map(|l| l.strip_prefix("Boot parameter data: "))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| panic!("no boot parameter data in: {out}"))
}

/// ipmitool's view of the power state: "on" or "off".
pub fn ipmitool_power(port: u16, suite: u8) -> String {
    let (ok, out) = ipmitool(port, suite, PASSWORD, &["power", "status"]);
    assert!(ok, "ipmitool power status failed: {out}");
    if out.contains("Chassis Power is on") {
        "on".into()
    } else if out.contains("Chassis Power is off") {
        "off".into()
    } else {
        panic!("unexpected ipmitool power status: {out}")
    }
}

fn wait_ready(port: u16, suite: u8, what: &str, log: &Path) {
    let ok = wait_for(Duration::from_secs(20), || {
        ipmitool(port, suite, PASSWORD, &["power", "status"])
            .0
            .then_some(())
    });
    assert!(
        ok.is_some(),
        "{what} did not answer ipmitool on port {port}: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// OpenIPMI's ipmi_sim with one BMC (suite 3 and the other SHA-1/MD5
/// suites; it has no SHA-256).
pub struct IpmiSim {
    pub port: u16,
    pub dir: tempfile::TempDir,
    _child: ChildGuard,
}

impl IpmiSim {
    pub fn start() -> IpmiSim {
        let bin = require_tool("ipmi_sim");
        let fixtures = repo_root().join("tests/fixtures/ipmi_sim");
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_udp_port();
        let conf = std::fs::read_to_string(fixtures.join("lan.conf.in"))
            .expect("lan.conf.in")
            .replace("@PORT@", &port.to_string())
            .replace("@STATE@", &dir.path().display().to_string())
            .replace(
                "@CHASSIS@",
                &fixtures.join("chassis.sh").display().to_string(),
            );
        let conf_path = dir.path().join("lan.conf");
        std::fs::write(&conf_path, conf).expect("write lan.conf");
        let log = dir.path().join("ipmi_sim.log");
        let mut cmd = Command::new(bin);
        cmd.current_dir(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .arg("-f")
            .arg(fixtures.join("sim.emu"))
            .arg("-s")
            .arg(dir.path())
            .arg("-n");
        let child = ChildGuard::spawn("ipmi_sim", &mut cmd, &log);
        wait_ready(port, 3, "ipmi_sim", &log);
        IpmiSim {
            port,
            dir,
            _child: child,
        }
    }

    /// Turn a fault switch of chassis.sh on or off ("stuck-power",
    /// "ignore-boot").
    pub fn fault(&self, name: &str, on: bool) {
        let p = self.dir.path().join(name);
        if on {
            std::fs::write(p, b"1").expect("fault file");
        } else {
            let _ = std::fs::remove_file(p);
        }
    }

    /// The chassis program's log of get/set calls.
    pub fn chassis_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

/// pyghmi's fake BMC (tests/fixtures/pyghmi/bmc.py).
pub struct PyghmiBmc {
    pub port: u16,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
    _child: ChildGuard,
}

impl PyghmiBmc {
    pub fn start(suite17: bool) -> PyghmiBmc {
        let python = venv().join("bin/python");
        assert!(
            python.exists(),
            "{} is missing: run scripts/setup",
            python.display()
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_udp_port();
        let log = dir.path().join("pyghmi.log");
        let mut cmd = Command::new(python);
        cmd.arg(repo_root().join("tests/fixtures/pyghmi/bmc.py"))
            .args([
                "--port",
                &port.to_string(),
                "--user",
                USER,
                "--password",
                PASSWORD,
            ]);
        if suite17 {
            cmd.arg("--suite17");
        }
        let child = ChildGuard::spawn("pyghmi bmc", &mut cmd, &log);
        wait_ready(port, 3, "pyghmi bmc", &log);
        PyghmiBmc {
            port,
            log,
            _dir: dir,
            _child: child,
        }
    }
}

/// What the proxy does to replies from the BMC.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// Send every reply twice.
    pub duplicate: bool,
    /// Before every reply, send a truncated copy and a copy with one byte
    /// flipped.
    pub garble: bool,
    /// Drop every Nth reply (0: none).
    pub drop_every: u64,
}

/// A UDP proxy on 127.0.0.1 in front of a BMC, for one client at a time.
pub struct UdpProxy {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub replies: Arc<AtomicU64>,
}

impl UdpProxy {
    pub fn start(bmc_port: u16, faults: Faults) -> UdpProxy {
        let front = UdpSocket::bind("127.0.0.1:0").expect("bind proxy");
        let back = UdpSocket::bind("127.0.0.1:0").expect("bind proxy back");
        back.connect(("127.0.0.1", bmc_port)).expect("connect bmc");
        front
            .set_read_timeout(Some(Duration::from_millis(20)))
            .expect("timeout");
        back.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("timeout");
        let port = front.local_addr().expect("addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let replies = Arc::new(AtomicU64::new(0));
        let (stop2, replies2) = (stop.clone(), replies.clone());
        let thread = std::thread::spawn(move || {
            let mut client: Option<SocketAddr> = None;
            let mut buf = [0u8; 2048];
            while !stop2.load(Ordering::Relaxed) {
                if let Ok((n, from)) = front.recv_from(&mut buf) {
                    client = Some(from);
                    let _ = back.send(&buf[..n]);
                }
                if let (Ok(n), Some(c)) = (back.recv(&mut buf), client) {
                    let k = replies2.fetch_add(1, Ordering::Relaxed) + 1;
                    if faults.drop_every > 0 && k % faults.drop_every == 0 {
                        continue;
                    }
                    if faults.garble {
                        let _ = front.send_to(&buf[..n / 2], c);
                        let mut flipped = buf[..n].to_vec();
                        let last = flipped.len() - 1;
                        flipped[last] ^= 0x5a;
                        let _ = front.send_to(&flipped, c);
                    }
                    let _ = front.send_to(&buf[..n], c);
                    if faults.duplicate {
                        let _ = front.send_to(&buf[..n], c);
                    }
                }
            }
        });
        UdpProxy {
            port,
            stop,
            thread: Some(thread),
            replies,
        }
    }
}

impl Drop for UdpProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
