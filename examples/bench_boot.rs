//! Benchmark, not a test: power-on to Ignition of one QEMU VM (SeaBIOS
//! with QEMU's iPXE NIC ROM, and OVMF), booted the same way in the same
//! run through three setups on a bridge in a network namespace:
//!
//! - metalherd (authoritative DHCP, TFTP, boot HTTP) as it ships: its
//!   answers to iPXE say no ProxyDHCP offer will come (option 175.176);
//!   once more with its minimal IPv6 router advertisement on
//!   (`boot.routerAdvertisement`), which ends iPXE's wait for IPv6
//!   autoconfiguration;
//! - metalherd with that turned off (`dhcp.ipxeNoProxyDhcp: false`), as it
//!   booted before: iPXE holds back its REQUEST waiting for a ProxyDHCP
//!   offer;
//! - dnsmasq (DHCP, TFTP) and nginx (a static script, the kernel and initrd,
//!   a static Ignition config): no metalherd at all.
//!
//! For the metalherd setups it also reports iPXE's DISCOVER -> ACK from the
//! Machine's boot timeline. `METALHERD_BENCH_ROUNDS` (default 2) boots
//! each setup that many times per firmware, interleaved. Needs root,
//! QEMU, OVMF, dnsmasq and nginx (scripts/setup installs them). Run with
//! `cargo run --example bench_boot` (BENCHMARKS.md has the runs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::initramfs;
use common::qemu::Firmware;
use common::qemu_boot::{Dhcp, boot_once, boot_with_dnsmasq_and_nginx};

#[derive(Default)]
struct Runs {
    to_ignition: Vec<f64>,
    ipxe_dhcp: Vec<f64>,
}

/// The median (of an even count, the mean of the middle two).
fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

fn show(v: &[f64]) -> String {
    match median(v) {
        Some(m) => format!(
            "{m:.2} s ({})",
            v.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "-".into(),
    }
}

fn main() {
    common::require_root();
    common::require_tool("qemu-system-x86_64");
    let rounds: usize = std::env::var("METALHERD_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let os = initramfs::build(dir.path());
    println!(
        "| firmware | setup | power-on to Ignition (median, runs) | iPXE DISCOVER to ACK (median, runs) | to Ignition / dnsmasq + nginx |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for (fw, mac) in [
        (Firmware::Bios, "52:54:00:4d:48:21"),
        (Firmware::Uefi, "52:54:00:4d:48:22"),
    ] {
        let (mut with_ra, mut after, mut before, mut peer) = (
            Runs::default(),
            Runs::default(),
            Runs::default(),
            Runs::default(),
        );
        for round in 0..rounds {
            for (dhcp, ra, runs) in [
                (Dhcp::Metalherd, true, &mut with_ra),
                (Dhcp::Metalherd, false, &mut after),
                (Dhcp::MetalherdIpxeWaits, false, &mut before),
            ] {
                let o = rt.block_on(boot_once(fw, ra, dhcp, mac, &os));
                eprintln!(
                    "{fw:?} {dhcp:?} ra={ra} round {round}: to Ignition {:.2} s, iPXE DHCP {:?}; {:?}",
                    o.to_ignition.as_secs_f64(),
                    o.ipxe_dhcp,
                    o.timeline
                );
                runs.to_ignition.push(o.to_ignition.as_secs_f64());
                runs.ipxe_dhcp
                    .extend(o.ipxe_dhcp.as_ref().map(Duration::as_secs_f64));
            }
            let (t, timeline) = boot_with_dnsmasq_and_nginx(fw, mac, &os);
            eprintln!(
                "{fw:?} dnsmasq + nginx round {round}: to Ignition {:.2} s; {timeline:?}",
                t.as_secs_f64()
            );
            peer.to_ignition.push(t.as_secs_f64());
        }
        let base = median(&peer.to_ignition).unwrap_or(f64::NAN);
        for (name, r) in [
            ("metalherd with its router advertisement", &with_ra),
            ("metalherd", &after),
            ("metalherd, `ipxeNoProxyDhcp: false`", &before),
            ("dnsmasq + nginx", &peer),
        ] {
            println!(
                "| {fw:?} | {name} | {} | {} | {:.2} |",
                show(&r.to_ignition),
                show(&r.ipxe_dhcp),
                median(&r.to_ignition).unwrap_or(f64::NAN) / base
            );
        }
    }
}
