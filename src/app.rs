//! `metalherd serve`: compose the store, the API server, the boot services
//! and the controllers under one cancellation token; fail fast on binds.

use std::sync::Arc;

use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigFile;
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

pub async fn serve(global: &crate::cli::GlobalArgs, args: ServeArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(p) => ConfigFile::load(p)?,
        None => ConfigFile::default(),
    };
    std::fs::create_dir_all(&global.data_dir)?;
    let store: Arc<dyn Store> = Arc::new(crate::store::embedded::EmbeddedStore::open(
        &global.data_dir.join("store.redb"),
    )?);
    let cancel = CancellationToken::new();
    let mut registry = prometheus_client::registry::Registry::default();
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(boot) = &config.boot {
        let settings = boot.settings(&global.data_dir)?;
        crate::http::boot::start(
            settings,
            store.clone(),
            Arc::new(crate::http::boot::ignition::MinimalIgnition),
            None,
            &mut registry,
            &mut tasks,
            cancel.clone(),
        )
        .await?;
    }
    if tasks.is_empty() {
        anyhow::bail!("nothing to serve: the config file has no boot section");
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    cancel.cancel();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    Ok(())
}
