//! QEMU machines that network-boot on a private link: a network namespace
//! with a bridge (the boot network, where metalherd listens) and a tap that
//! a QEMU VM (software emulation only, `-accel tcg`) plugs into. Legacy BIOS
//! boots with SeaBIOS and QEMU's NIC ROM (already iPXE); UEFI boots OVMF,
//! whose own network stack does DHCP and TFTP before iPXE takes over (the
//! NIC ROM is disabled so the firmware path is really exercised).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::netns::Netns;
use super::proc::{ChildGuard, wait_for};

/// A namespace with a bridge and one tap on it.
pub struct BridgeLab {
    pub ns: Netns,
    pub bridge: String,
    pub tap: String,
}

impl BridgeLab {
    /// `cidr` is the bridge's address, like "10.77.0.1/24".
    pub fn new(cidr: &str) -> BridgeLab {
        let ns = Netns::new("mhq");
        let bridge = super::unique("br");
        let tap = super::unique("tap");
        ns.exec(&["ip", "link", "add", &bridge, "type", "bridge"]);
        ns.exec(&[
            "ip",
            "link",
            "set",
            &bridge,
            "type",
            "bridge",
            "forward_delay",
            "0",
            "stp_state",
            "0",
        ]);
        ns.exec(&["ip", "addr", "add", cidr, "dev", &bridge]);
        ns.exec(&["ip", "link", "set", &bridge, "up"]);
        ns.exec(&["ip", "tuntap", "add", "dev", &tap, "mode", "tap"]);
        ns.exec(&["ip", "link", "set", &tap, "master", &bridge]);
        ns.exec(&["ip", "link", "set", &tap, "up"]);
        BridgeLab { ns, bridge, tap }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Firmware {
    Bios,
    Uefi,
    /// OVMF with its PXE boot options turned off (fw_cfg
    /// `opt/org.tianocore/IPv4PXESupport` and `IPv6PXESupport` = `n`), so
    /// the network boot it tries is UEFI HTTP boot: DHCP as `HTTPClient`,
    /// then the URL the DHCP answer names. No TFTP at all.
    UefiHttp,
    /// OVMF enforcing Secure Boot with Microsoft's keys enrolled (SMM
    /// build), as servers ship: the signed shim runs, iPXE does not.
    SecureBoot,
    /// OVMF enforcing Secure Boot that trusts only its test key (Debian's
    /// snakeoil key, standing in for a site's own).
    SiteKey,
}

pub struct Vm {
    pub guard: ChildGuard,
    pub serial: PathBuf,
    pub started: Instant,
    pub started_at: jiff::Timestamp,
}

/// Start a VM that boots from its NIC (`mac`) on the lab's tap.
pub fn start_vm(lab: &BridgeLab, fw: Firmware, mac: &str, work: &Path) -> Vm {
    let qemu = super::require_tool("qemu-system-x86_64");
    let serial = work.join(format!("serial-{fw:?}.log"));
    let mut args: Vec<String> = [
        "-accel",
        "tcg",
        "-machine",
        "q35",
        "-m",
        "768",
        "-smp",
        "1",
        "-display",
        "none",
        "-monitor",
        "none",
        "-no-reboot",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(["-serial".into(), format!("file:{}", serial.display())]);
    args.extend([
        "-netdev".into(),
        format!("tap,id=n0,ifname={},script=no,downscript=no", lab.tap),
    ]);
    match fw {
        Firmware::Bios => {
            args.extend([
                "-device".into(),
                format!("virtio-net-pci,netdev=n0,mac={mac},bootindex=1"),
            ]);
        }
        Firmware::Uefi | Firmware::UefiHttp | Firmware::SecureBoot | Firmware::SiteKey => {
            let (code, vars_src) = match fw {
                Firmware::SecureBoot => (
                    Path::new("/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"),
                    Path::new("/usr/share/OVMF/OVMF_VARS_4M.ms.fd"),
                ),
                Firmware::SiteKey => (
                    Path::new("/usr/share/OVMF/OVMF_CODE_4M.snakeoil.fd"),
                    Path::new("/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd"),
                ),
                _ => (
                    Path::new("/usr/share/OVMF/OVMF_CODE_4M.fd"),
                    Path::new("/usr/share/OVMF/OVMF_VARS_4M.fd"),
                ),
            };
            if matches!(fw, Firmware::SecureBoot | Firmware::SiteKey) {
                // The Secure Boot builds keep their variables in SMM.
                args[3] = "q35,smm=on".into();
                args.extend([
                    "-global".into(),
                    "driver=cfi.pflash01,property=secure,value=on".into(),
                ]);
            }
            assert!(
                code.is_file() && vars_src.is_file(),
                "OVMF missing: run scripts/setup"
            );
            let vars = work.join("OVMF_VARS.fd");
            std::fs::copy(vars_src, &vars).expect("copy OVMF vars");
            args.extend([
                "-drive".into(),
                format!(
                    "if=pflash,format=raw,unit=0,readonly=on,file={}",
                    code.display()
                ),
                "-drive".into(),
                format!("if=pflash,format=raw,unit=1,file={}", vars.display()),
                "-device".into(),
                format!("virtio-net-pci,netdev=n0,mac={mac},bootindex=1,romfile="),
            ]);
            if fw == Firmware::UefiHttp {
                for v in ["IPv4PXESupport", "IPv6PXESupport"] {
                    args.extend([
                        "-fw_cfg".into(),
                        format!("name=opt/org.tianocore/{v},string=n"),
                    ]);
                }
            }
        }
    }
    let mut cmd = lab
        .ns
        .command(qemu.to_str().unwrap_or("qemu-system-x86_64"));
    cmd.args(&args);
    let started_at = jiff::Timestamp::now();
    let guard = ChildGuard::spawn("qemu", &mut cmd, &work.join(format!("qemu-{fw:?}.log")));
    Vm {
        guard,
        serial,
        started: Instant::now(),
        started_at,
    }
}

impl Vm {
    pub fn serial_text(&self) -> String {
        std::fs::read(&self.serial)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Wait for `marker` on the serial console; the time it took, if it came.
    pub fn wait_serial(&mut self, marker: &str, timeout: Duration) -> Option<Duration> {
        wait_for(timeout, || {
            if self.serial_text().contains(marker) {
                Some(self.started.elapsed())
            } else {
                None
            }
        })
    }

    /// Like `wait_serial`, but give up early when QEMU exits without it.
    pub fn wait_serial_or_exit(&mut self, marker: &str, timeout: Duration) -> Option<Duration> {
        let r = wait_for(timeout, || {
            if self.serial_text().contains(marker) {
                Some(Some(self.started.elapsed()))
            } else if !self.guard.running() {
                Some(None)
            } else {
                None
            }
        });
        r.flatten()
    }

    /// Wait for QEMU to exit (the guest rebooted or powered off).
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        wait_for(timeout, || (!self.guard.running()).then_some(())).is_some()
    }
}

/// Run a command (for diagnostics) and return its output, never failing.
pub fn diag(cmd: &mut Command) -> String {
    cmd.output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}
