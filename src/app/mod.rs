//! `metalherd serve`: the composition root. Opens the store, then starts
//! the boot services ([`boot`]), the controllers ([`controllers`]) and the
//! API server ([`api`]) under one cancellation token; fails fast on binds.
//!
//! Start-up order: data directory (writable?), store (and its `default`
//! namespace), API token, listener
//! (port free?), TLS identity (the data directory's CA and a fresh server
//! certificate, or `--tls-cert/--tls-key`), then services. Any of these failing is one clear line and
//! a non-zero exit, before anything runs. SIGTERM or SIGINT cancel the
//! token; the API stops accepting, open watches end, services drain.

mod api;
mod boot;
mod controllers;
mod firmware;
mod leader;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cli::serve::ServeArgs;
use crate::datadir::TOKEN_FILE;
use crate::http::ops::{ApiMetrics, MetricsRegistry};
use crate::store::{Store, StoreConfig};

/// How long services get to finish after shutdown begins.
const DRAIN: Duration = Duration::from_secs(10);

pub async fn serve(global: &crate::cli::GlobalArgs, args: ServeArgs) -> anyhow::Result<()> {
    let data_dir = global.data_dir.clone();
    crate::datadir::prepare_data_dir(&data_dir)?;
    let mut config = match &args.config {
        Some(p) => crate::config::ConfigFile::load(p)?,
        None => crate::config::ConfigFile::default(),
    };
    // Flags override the file; bad ones stop here, before anything binds.
    config.dhcp = args.dhcp_flags().apply(config.dhcp.take())?;
    let history = config
        .store
        .clone()
        .unwrap_or_default()
        .history()
        .map_err(|e| anyhow::anyhow!("config: {e}"))?;
    let mut store_config = args.store_config(&data_dir)?;
    if let StoreConfig::Embedded { history: h, .. } = &mut store_config {
        *h = history;
    }
    if let StoreConfig::Kubernetes {
        kubeconfig,
        namespace,
    } = &store_config
    {
        config.kube_store = Some(crate::config::KubeStore {
            kubeconfig: kubeconfig.clone(),
            namespace: namespace.clone(),
        });
    }
    let election = args.leader_election()?;
    let store: Arc<dyn Store> = match crate::store::open(&store_config).await {
        Ok(s) => s,
        Err(e) if matches!(store_config, StoreConfig::Embedded { .. }) => {
            anyhow::bail!("{e} (is another metalherd using this data directory?)")
        }
        Err(e) => anyhow::bail!("cannot open the Kubernetes store: {e}"),
    };
    // Standalone: `default`, and a Namespace object for each namespace
    // objects of an older data directory are in. A cluster has its own.
    if matches!(store_config, StoreConfig::Embedded { .. }) {
        let created = crate::http::api::namespaces::ensure(&*store)
            .await
            .context("creating the default namespace")?;
        if !created.is_empty() {
            tracing::info!(namespaces = ?created, "namespaces created");
        }
    }
    let token = crate::datadir::load_or_create_token(&data_dir)?;
    let addr: SocketAddr = args.listen.parse().with_context(|| {
        format!(
            "--listen {:?} is not an address like 127.0.0.1:7080",
            args.listen
        )
    })?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!("cannot listen on {addr}: the port is in use (another metalherd running? choose another with --listen)")
        } else {
            anyhow::anyhow!("cannot listen on {addr}: {e}")
        }
    })?;
    let bound = listener.local_addr().context("listener address")?;
    let tls = api::tls_config(global.insecure_http, bound, &data_dir, &args)?;
    crate::datadir::write_server_url(&data_dir, bound, tls.is_some())?;

    let cancel = CancellationToken::new();
    // The controllers and boot services read Machines, classes, sets and
    // Secrets by name on every reconcile and boot request: on a remote API
    // server they read them from a cache the watches keep (the API this
    // process serves reads the server itself).
    let working: Arc<dyn Store> = if matches!(store_config, StoreConfig::Kubernetes { .. }) {
        Arc::new(crate::store::cache::CachingStore::new(
            store.clone(),
            cancel.clone(),
        ))
    } else {
        store.clone()
    };
    let registry = MetricsRegistry::new();
    let api_metrics = ApiMetrics::register(&registry);
    registry.with_registry(crate::bmc::ipmi::metrics::register);
    registry.with_registry(crate::bmc::metrics::register);
    let mut tasks: JoinSet<()> = JoinSet::new();

    // Without election this process acts; with it, `leader::run` starts
    // the boot services and controllers once the Lease is ours.
    let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
    match election {
        None => {
            let started = boot::start(
                &config, &data_dir, &working, &registry, &mut tasks, &cancel, false,
            )
            .await?;
            controllers::start(
                &config, &working, &registry, started, None, &mut tasks, &cancel,
            )
            .await?;
        }
        Some(candidate) => {
            let key = crate::leader::token_key::load_or_create(&*store, &candidate.namespace)
                .await
                .context("leader election")?;
            crate::leader::token_key::install(&key, &data_dir)?;
            tracing::info!(identity = %candidate.identity, lease = %candidate.name,
                namespace = %candidate.namespace, "leader election: standing by until the Lease is ours");
            let (elector, leading) = crate::leader::Elector::new(store.clone(), candidate);
            let gauge = elector.gauge();
            registry.with_registry(|r| {
                r.register(
                    "leader",
                    "1 while this replica holds the leader Lease",
                    gauge,
                )
            });
            tasks.spawn(leader::run(
                elector,
                leading,
                leader::Acting {
                    config: config.clone(),
                    data_dir: data_dir.clone(),
                    store: working.clone(),
                    registry: registry.clone(),
                },
                lost.clone(),
                cancel.clone(),
            ));
        }
    }
    let admission = crate::http::api::admission::Admission {
        dhcp_proxy: config
            .dhcp
            .as_ref()
            .is_some_and(|d| d.mode == crate::dhcp::config::DhcpMode::Proxy),
    };
    let app = api::router(&store, &registry, api_metrics, &token, &cancel, admission);

    spawn_signal_handler(cancel.clone())?;
    tracing::info!(
        listen = %bound,
        data_dir = %data_dir.display(),
        "metalherd serving (token in {})",
        data_dir.join(TOKEN_FILE).display()
    );
    let served = match tls {
        Some(config) => crate::tls::serve(listener, config, app, cancel.clone(), DRAIN).await,
        None => {
            let shutdown = cancel.clone();
            axum::serve(crate::http::no_delay(listener), app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await
        }
    };
    // Whatever ended the server ends everything else too.
    cancel.cancel();
    let drained =
        tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!("services did not stop within {DRAIN:?}; exiting anyway");
        tasks.abort_all();
    }
    served.context("API server")?;
    if lost.load(std::sync::atomic::Ordering::SeqCst) {
        // Non-zero, so a supervisor restarts this replica as a standby.
        anyhow::bail!("lost the leader Lease: stopped acting and exited");
    }
    tracing::info!("metalherd stopped");
    Ok(())
}

/// SIGTERM and SIGINT cancel the token (once; a second signal is ignored
/// while shutdown runs).
fn spawn_signal_handler(cancel: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot install SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot install SIGINT handler")?;
    tokio::spawn(async move {
        let sig = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            _ = cancel.cancelled() => return,
        };
        tracing::info!(signal = sig, "shutting down");
        cancel.cancel();
    });
    Ok(())
}
