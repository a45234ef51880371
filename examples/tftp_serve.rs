//! Serve a directory over TFTP with metalherd's server alone (used by
//! scripts/bench-tftp): `tftp_serve LISTEN_ADDR ROOT_DIR`. Stops on SIGTERM
//! or Ctrl-C and prints the transfer metrics to stderr.
//! `TFTP_SERVE_THREADS=N` sets the server's `threads` (default 1: its own
//! current-thread runtime; 0: this example's multi-thread runtime).

use std::sync::Arc;

use metalherd::files::DirSource;
use metalherd::tftp::{NoEvents, TftpConfig, TftpMetrics};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    metalherd::telemetry::init(false);
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(root)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: tftp_serve LISTEN_ADDR ROOT_DIR");
    };
    let config = TftpConfig {
        listen: listen.parse()?,
        root: root.into(),
        threads: match std::env::var("TFTP_SERVE_THREADS") {
            Ok(t) => t.parse()?,
            Err(_) => TftpConfig::default().threads,
        },
        // The storm comes from one host standing in for a rack of them.
        max_transfers_per_client: TftpConfig::default().max_transfers,
        ..TftpConfig::default()
    };
    let source = Arc::new(DirSource::new(&config.root)?);
    let server = metalherd::tftp::bind(&metalherd::tftp::TftpSettings::try_from(&config)?)?;
    eprintln!("tftp_serve: listening on {}", server.local_addr());
    let metrics = TftpMetrics::default();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return,
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        stop.cancel();
    });
    server
        .serve(source, Arc::new(NoEvents), metrics.clone(), cancel)
        .await;
    let mut reg = prometheus_client::registry::Registry::default();
    metrics.register(&mut reg);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg)?;
    eprint!("{text}");
    Ok(())
}
