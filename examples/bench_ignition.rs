//! Benchmark, not a test: `cargo run --release --example bench_ignition`.
//! Renders the install and node configs of the example Machines and
//! classes (`deploy/examples/`), prints p50/p99 per config and configs/s on
//! one thread, and ignition-validate's time per config measured in the same
//! run as the reference.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::ignition::{ctx, examples, secrets, validate};
use metalherd::ignition::{NodeConfigSource, Stage, render, to_json};

fn json(c: &metalherd::ignition::Config) -> String {
    to_json(c).unwrap()
}

fn main() {
    let pairs = examples();
    let c = ctx(NodeConfigSource::Embed);
    const N: usize = 2000;
    for stage in [Stage::Node, Stage::Install] {
        let mut times = Vec::with_capacity(N);
        let start = Instant::now();
        for i in 0..N {
            let (_, m, class) = &pairs[i % pairs.len()];
            let t = Instant::now();
            let cfg = render(stage, m, class, &secrets(), &c).unwrap();
            let s = to_json(&cfg).unwrap();
            std::hint::black_box(s);
            times.push(t.elapsed());
        }
        let total = start.elapsed();
        times.sort();
        let p = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
        // Reference: the upstream validator over the same configs, bounded.
        let json_cfg = json(&render(stage, &pairs[0].1, &pairs[0].2, &secrets(), &c).unwrap());
        let mut vt = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            validate(&json_cfg).unwrap();
            vt.push(t.elapsed());
        }
        vt.sort();
        let v50: Duration = vt[vt.len() / 2];
        println!(
            "ignition {:7}: p50 {:?} p99 {:?} {:.0} configs/s (1 thread, {N} renders + to_json); ignition-validate p50 {:?} = {:.0}x render p50",
            stage.as_str(),
            p(0.50),
            p(0.99),
            N as f64 / total.as_secs_f64(),
            v50,
            v50.as_secs_f64() / p(0.50).as_secs_f64(),
        );
    }
}
