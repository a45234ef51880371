//! `metalherd serve`: compose the store, the API server, the boot services
//! and the controllers under one cancellation token; fail fast on binds.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigFile;
use crate::directory::{BootRecorder, Directory};
use crate::store::Store;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the API server.
    #[arg(long, env = "METALHERD_LISTEN", default_value = "127.0.0.1:7080")]
    pub listen: String,
    /// Config file (YAML) for the boot services.
    #[arg(long, env = "METALHERD_CONFIG")]
    pub config: Option<std::path::PathBuf>,
}

/// File name of the embedded store inside the data directory.
pub const STORE_FILE: &str = "store.redb";

pub async fn serve(global: &crate::cli::GlobalArgs, args: ServeArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(p) => ConfigFile::load(p)?,
        None => ConfigFile::default(),
    };
    std::fs::create_dir_all(&global.data_dir)
        .with_context(|| format!("cannot create data directory {}", global.data_dir.display()))?;
    let store: Arc<dyn Store> = Arc::new(crate::store::embedded::EmbeddedStore::open(
        &global.data_dir.join(STORE_FILE),
    )?);
    let cancel = CancellationToken::new();
    let directory = Directory::new();
    tokio::spawn(directory.clone().run(store.clone(), cancel.clone()));
    let recorder = BootRecorder::spawn(store.clone(), cancel.clone());
    let dhcp = start_dhcp(
        &config,
        directory,
        store,
        recorder,
        &global.data_dir,
        crate::dhcp::metrics::DhcpMetrics::default(),
        cancel.clone(),
    )
    .await?;
    shutdown_signal().await;
    cancel.cancel();
    if let Some(h) = dhcp {
        h.await.context("dhcp task")??;
    }
    Ok(())
}

/// Start DHCP when the config file has a `dhcp:` section: validate, bind
/// (failing fast), then serve in the background until `cancel`.
pub async fn start_dhcp(
    config: &ConfigFile,
    directory: Directory,
    store: Arc<dyn Store>,
    recorder: BootRecorder,
    data_dir: &Path,
    metrics: crate::dhcp::metrics::DhcpMetrics,
    cancel: CancellationToken,
) -> anyhow::Result<Option<tokio::task::JoinHandle<Result<(), crate::dhcp::DhcpError>>>> {
    let Some(wire) = config.dhcp.clone() else {
        return Ok(None);
    };
    let settings = crate::dhcp::DhcpSettings::try_from(wire)?;
    let bound = crate::dhcp::server::BoundServer::bind(settings, data_dir).await?;
    Ok(Some(tokio::spawn(
        bound.serve(directory, store, recorder, metrics, cancel),
    )))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
