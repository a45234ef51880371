//! TFTP boot-storm load client (a benchmark tool, not part of metalherd):
//! N concurrent read transfers from one process on tokio, one UDP socket
//! per transfer as each firmware has its own, asking what a UEFI client
//! asks (blksize, tsize, optionally windowsize per RFC 7440). Every block
//! is compared with the original file; the storm's wall time, failures,
//! retransmissions and this process's own CPU time are printed as one
//! `key=value` line on stdout (details on stderr).
//!
//!   tftp_storm --server 127.0.0.1:6969 --file ipxe.efi \
//!       --original /usr/lib/ipxe/ipxe.efi --clients 200 --blksize 1468 [--windowsize 8]
//!
//! Traffic goes only to `--server`; sockets are bound on `--bind`
//! (default 127.0.0.1).

mod client;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use client::{Failure, Params, Stats, Step, Transfer};
use metalherd::tftp::packet::{self, code};
use tokio::net::UdpSocket;

#[derive(Parser, Debug)]
#[command(about = "TFTP boot-storm load client")]
struct Args {
    /// The server's request address.
    #[arg(long)]
    server: SocketAddr,
    /// File name to request.
    #[arg(long, default_value = "ipxe.efi")]
    file: String,
    /// The original file, to compare every received byte with.
    #[arg(long)]
    original: std::path::PathBuf,
    /// Concurrent transfers.
    #[arg(long, default_value_t = 200)]
    clients: usize,
    #[arg(long, default_value_t = 1468)]
    blksize: u16,
    /// Ask for this windowsize (RFC 7440); lock-step without it.
    #[arg(long)]
    windowsize: Option<u16>,
    /// Do not ask for tsize.
    #[arg(long)]
    no_tsize: bool,
    /// Retransmission timeout.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// Retransmissions without progress before a transfer fails.
    #[arg(long, default_value_t = 5)]
    retries: u32,
    /// Runtime worker threads (1: a current-thread runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Local address for the client sockets.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
}

struct Report {
    result: Result<u64, Failure>,
    /// Block size and window the server agreed to.
    agreed: (usize, u16),
    stats: Stats,
    elapsed: Duration,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let original = std::fs::read(&args.original)
        .with_context(|| format!("reading {}", args.original.display()))?;
    // Shared by every transfer task for the whole run.
    let want: &'static [u8] = Box::leak(original.into_boxed_slice());
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    rt.block_on(storm(args, want))
}

/// User + system CPU time of this process so far.
fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the parenthesised command name; utime and stime
            // are the 14th and 15th fields of the whole line.
            let rest = s.rsplit_once(')')?.1.to_string();
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

async fn storm(args: Args, want: &'static [u8]) -> anyhow::Result<()> {
    let params = Params {
        file: args.file.clone(),
        blksize: args.blksize,
        windowsize: args.windowsize,
        tsize: !args.no_tsize,
        timeout: Duration::from_millis(args.timeout_ms),
        max_retries: args.retries,
    };
    // Every firmware is up and has its socket before the storm starts.
    let mut sockets = Vec::with_capacity(args.clients);
    for _ in 0..args.clients {
        sockets.push(UdpSocket::bind(SocketAddr::new(args.bind, 0)).await?);
    }
    let cpu0 = cpu_time();
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for sock in sockets {
        let p = params.clone();
        let server = args.server;
        tasks.spawn(async move {
            let t0 = Instant::now();
            let (result, stats, agreed) = match fetch(&sock, server, p, want).await {
                Ok(x) => x,
                Err(e) => (
                    Err(Failure::ServerError {
                        code: u16::MAX,
                        message: format!("socket: {e}"),
                    }),
                    Stats::default(),
                    (0, 0),
                ),
            };
            Report {
                result,
                agreed,
                stats,
                elapsed: t0.elapsed(),
            }
        });
    }
    let mut reports = Vec::with_capacity(args.clients);
    while let Some(r) = tasks.join_next().await {
        reports.push(r?);
    }
    let wall = start.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);

    let mut total = Stats::default();
    let mut failed = 0;
    for r in &reports {
        total.retransmissions += r.stats.retransmissions;
        total.duplicate_blocks += r.stats.duplicate_blocks;
        total.out_of_order += r.stats.out_of_order;
        total.acks_sent += r.stats.acks_sent;
        if let Err(f) = &r.result {
            failed += 1;
            if failed <= 5 {
                eprintln!("tftp_storm: transfer failed: {f:?}");
            }
        }
    }
    if let Some(r) = reports.first() {
        eprintln!(
            "tftp_storm: agreed blksize {} windowsize {}",
            r.agreed.0, r.agreed.1
        );
    }
    let mut times: Vec<Duration> = reports.iter().map(|r| r.elapsed).collect();
    times.sort();
    let pct = |p: usize| {
        times
            .get((times.len().saturating_sub(1)) * p / 100)
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    };
    println!(
        "clients={} ok={} failed={} wall_ms={:.1} p50_ms={:.1} max_ms={:.1} retransmissions={} duplicate_blocks={} out_of_order={} acks={} client_cpu_ms={}",
        args.clients,
        reports.len() - failed,
        failed,
        wall.as_secs_f64() * 1e3,
        pct(50),
        pct(100),
        total.retransmissions,
        total.duplicate_blocks,
        total.out_of_order,
        total.acks_sent,
        cpu.as_millis(),
    );
    Ok(())
}

/// One transfer: request, lock onto the server's transfer id, then feed
/// datagrams and timer ticks to the state machine until it finishes.
async fn fetch(
    sock: &UdpSocket,
    server: SocketAddr,
    params: Params,
    want: &'static [u8],
) -> std::io::Result<(Result<u64, Failure>, Stats, (usize, u16))> {
    let (mut t, rrq) = Transfer::new(params, want, Instant::now());
    sock.send_to(&rrq, server).await?;
    let mut tid: Option<SocketAddr> = None;
    let mut buf = vec![0u8; 65536];
    // One timer per transfer, moved only when it fires: progress pushes the
    // transfer's deadline on without touching the timer.
    let sleep = tokio::time::sleep_until(t.deadline().into());
    tokio::pin!(sleep);
    loop {
        let step = tokio::select! {
            r = sock.recv_from(&mut buf) => {
                let (n, from) = r?;
                match tid {
                    Some(id) if id != from => {
                        // RFC 1350: a packet from another transfer id.
                        let e = packet::encode_error(code::UNKNOWN_TID, "unknown transfer id");
                        let _ = sock.send_to(&e, from).await;
                        continue;
                    }
                    None if from.ip() != server.ip() || from == server => continue,
                    None => {
                        tid = Some(from);
                        sock.connect(from).await?;
                    }
                    Some(_) => {}
                }
                t.on_datagram(Instant::now(), buf.get(..n).unwrap_or_default())
            }
            _ = &mut sleep => {
                let s = t.on_timer(Instant::now());
                sleep.as_mut().reset(t.deadline().into());
                s
            }
        };
        match step {
            Step::Nothing => {}
            Step::Send(b) => match tid {
                Some(_) => {
                    sock.send(&b).await?;
                }
                None => {
                    sock.send_to(&b, server).await?;
                }
            },
            Step::Finish(b, result) => {
                if let (Some(b), Some(_)) = (b, tid) {
                    let _ = sock.send(&b).await;
                }
                return Ok((result, t.stats, t.agreed()));
            }
        }
    }
}
