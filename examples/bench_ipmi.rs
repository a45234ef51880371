//! Benchmark, not a test: RMCP+ session setups per second and
//! chassis-status polls per second on one session, metalherd's IPMI driver
//! against ipmitool on the same emulator in the same run. Counts are
//! bounded. Run with: `cargo run --example bench_ipmi`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::ipmi_emulators::{IpmiSim, PASSWORD, PyghmiBmc, USER, ipmitool};
use metalherd::bmc::ipmi::{CipherSuite, IpmiBmc};
use metalherd::bmc::{Bmc, Credentials, Timing};

const SESSIONS: u32 = 40;
const POLLS: u32 = 400;

fn timing() -> Timing {
    Timing {
        power_deadline: Duration::from_secs(10),
        poll_interval: Duration::from_millis(100),
        request_timeout: Duration::from_secs(4),
    }
}

async fn ours_sessions(port: u16, suite: CipherSuite) -> f64 {
    let start = Instant::now();
    for _ in 0..SESSIONS {
        let b = IpmiBmc::connect(
            "127.0.0.1",
            port,
            Credentials::new(USER, PASSWORD),
            suite,
            timing(),
        )
        .await
        .expect("connect");
        b.power_state().await.expect("power");
        b.close().await.expect("close");
    }
    SESSIONS as f64 / start.elapsed().as_secs_f64()
}

fn ipmitool_sessions(port: u16, suite: u8) -> f64 {
    let start = Instant::now();
    for _ in 0..SESSIONS {
        let (ok, out) = ipmitool(port, suite, PASSWORD, &["power", "status"]);
        assert!(ok, "{out}");
    }
    SESSIONS as f64 / start.elapsed().as_secs_f64()
}

async fn ours_polls(port: u16, suite: CipherSuite) -> f64 {
    let b = IpmiBmc::connect(
        "127.0.0.1",
        port,
        Credentials::new(USER, PASSWORD),
        suite,
        timing(),
    )
    .await
    .expect("connect");
    let start = Instant::now();
    for _ in 0..POLLS {
        b.power_state().await.expect("power");
    }
    let r = POLLS as f64 / start.elapsed().as_secs_f64();
    b.close().await.expect("close");
    r
}

/// ipmitool `exec` runs a command file in one session.
fn ipmitool_polls(port: u16, suite: u8) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cmds");
    std::fs::write(&file, "power status\n".repeat(POLLS as usize)).expect("write");
    let start = Instant::now();
    let out = Command::new("ipmitool")
        .args(["-I", "lanplus", "-H", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", USER, "-P", PASSWORD, "-C", &suite.to_string()])
        .arg("exec")
        .arg(&file)
        .output()
        .expect("ipmitool");
    let elapsed = start.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.matches("Chassis Power is").count(),
        POLLS as usize,
        "{text}"
    );
    POLLS as f64 / elapsed
}

fn line(what: &str, ours: f64, theirs: f64) {
    println!(
        "| {what} | {ours:.1}/s | {theirs:.1}/s | {:.2} |",
        ours / theirs
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("| measurement | metalherd | ipmitool | ratio |");
    println!("| --- | --- | --- | --- |");
    let sim = IpmiSim::start();
    line(
        "ipmi_sim, suite 3: session setup + status + close",
        ours_sessions(sim.port, CipherSuite::Suite3).await,
        ipmitool_sessions(sim.port, 3),
    );
    line(
        "ipmi_sim, suite 3: status polls on one session",
        ours_polls(sim.port, CipherSuite::Suite3).await,
        ipmitool_polls(sim.port, 3),
    );
    let pyg = PyghmiBmc::start(true);
    for (suite, id) in [(CipherSuite::Suite3, 3), (CipherSuite::Suite17, 17)] {
        line(
            &format!("pyghmi, suite {id}: session setup + status + close"),
            ours_sessions(pyg.port, suite).await,
            ipmitool_sessions(pyg.port, id),
        );
        line(
            &format!("pyghmi, suite {id}: status polls on one session"),
            ours_polls(pyg.port, suite).await,
            ipmitool_polls(pyg.port, id),
        );
    }
}
