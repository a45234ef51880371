//! `metalherd serve`: compose the store, the API server, the boot services
//! and the controllers under one cancellation token; fail fast on binds.
//!
//! Start-up order: data directory (writable?), store, API token, listener
//! (port free?), then services. Any of these failing is one clear line and
//! a non-zero exit, before anything runs. SIGTERM or SIGINT cancel the
//! token; the API stops accepting, open watches end, services drain.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::http::api::ApiState;
use crate::http::ops::{ApiMetrics, MetricsRegistry};
use crate::store::{Store, StoreConfig};

/// File name of the embedded store inside the data directory.
pub const STORE_FILE: &str = "metalherd.redb";
/// File holding the API bearer token (mode 0600).
pub const TOKEN_FILE: &str = "api-token";
/// File holding the URL the API server listens on, for the CLI.
pub const SERVER_URL_FILE: &str = "server-url";

/// How long services get to finish after shutdown begins.
const DRAIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the API server.
    #[arg(long, env = "METALHERD_LISTEN", default_value = "127.0.0.1:7080")]
    pub listen: String,
    /// Config file (YAML) for the boot services.
    #[arg(long, env = "METALHERD_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    /// DHCP: interface to serve on (overrides dhcp.interface; starts DHCP
    /// even without a dhcp: section).
    #[arg(long, env = "METALHERD_DHCP_INTERFACE", value_name = "IFACE")]
    pub dhcp_interface: Option<String>,
    /// DHCP: authoritative or proxy (overrides dhcp.mode).
    #[arg(long, env = "METALHERD_DHCP_MODE", value_name = "MODE")]
    pub dhcp_mode: Option<String>,
    /// DHCP: our address, the server identifier (overrides dhcp.serverAddress).
    #[arg(long, env = "METALHERD_DHCP_SERVER_ADDRESS", value_name = "IPV4")]
    pub dhcp_server_address: Option<String>,
    /// DHCP: batch or always (overrides dhcp.leaseSync.mode).
    #[arg(long, env = "METALHERD_DHCP_LEASE_SYNC", value_name = "MODE")]
    pub dhcp_lease_sync: Option<String>,
}

impl ServeArgs {
    fn dhcp_flags(&self) -> crate::dhcp::flags::DhcpFlags {
        crate::dhcp::flags::DhcpFlags {
            interface: self.dhcp_interface.clone(),
            mode: self.dhcp_mode.clone(),
            server_address: self.dhcp_server_address.clone(),
            lease_sync: self.dhcp_lease_sync.clone(),
        }
    }
}

pub async fn serve(global: &crate::cli::GlobalArgs, args: ServeArgs) -> anyhow::Result<()> {
    let data_dir = global.data_dir.clone();
    prepare_data_dir(&data_dir)?;
    let mut config = match &args.config {
        Some(p) => crate::config::ConfigFile::load(p)?,
        None => crate::config::ConfigFile::default(),
    };
    // Flags override the file; bad ones stop here, before anything binds.
    config.dhcp = args.dhcp_flags().apply(config.dhcp.take())?;
    let store: Arc<dyn Store> = crate::store::open(&StoreConfig::Embedded {
        path: data_dir.join(STORE_FILE),
    })
    .map_err(|e| anyhow::anyhow!("{e} (is another metalherd using this data directory?)"))?;
    let token = load_or_create_token(&data_dir)?;
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
    write_server_url(&data_dir, bound)?;

    let cancel = CancellationToken::new();
    let registry = MetricsRegistry::new();
    let api_metrics = ApiMetrics::register(&registry);
    registry.with_registry(crate::bmc::ipmi::metrics::register);
    registry.with_registry(crate::bmc::metrics::register);
    let mut tasks: JoinSet<()> = JoinSet::new();

    // The boot directory: MAC/IP -> Machine index for the boot services.
    let directory = crate::directory::Directory::new();
    tasks.spawn(directory.clone().run(store.clone(), cancel.clone()));

    // ---- Boot services start here (DHCP, TFTP, boot HTTP, Ignition). ----
    // They take `store`, `directory`, `registry` (metrics) and a child of
    // `cancel`, bind their sockets now (fail fast), and run in `tasks`.
    let recorder = crate::directory::BootRecorder::spawn(store.clone(), cancel.clone());
    let mut lease_releaser = None;
    let mut lease_view = None;
    if let Some(wire) = config.dhcp.clone() {
        let metrics = crate::dhcp::metrics::DhcpMetrics::default();
        registry.with_registry(|r| metrics.register(r));
        let settings = crate::dhcp::DhcpSettings::try_from(wire).context("config dhcp")?;
        let bound = crate::dhcp::server::BoundServer::bind(settings, &data_dir).await?;
        lease_releaser = Some(bound.releaser());
        lease_view = Some(bound.lease_view());
        let (st, dir, rec, c) = (
            Some(crate::discovery::spawn(store.clone(), cancel.clone())),
            directory.clone(),
            recorder.clone(),
            cancel.clone(),
        );
        tasks.spawn(async move {
            if let Err(e) = bound.serve(dir, st, rec, metrics, c.clone()).await {
                tracing::error!(error = %e, "DHCP server stopped");
                c.cancel();
            }
        });
    }

    if let Some(wire) = config.tftp.clone() {
        let metrics = crate::tftp::TftpMetrics::default();
        registry.with_registry(|r| metrics.register(r));
        let source = crate::tftp::DirSource::new(&wire.root)
            .with_context(|| format!("config tftp.root {}", wire.root.display()))?;
        let bound = crate::tftp::bind(&wire)?;
        let events = Arc::new(crate::tftp::BootTimeline {
            directory: directory.clone(),
            recorder: recorder.clone(),
        });
        tasks.spawn(bound.serve(Arc::new(source), events, metrics, cancel.clone()));
    }
    if let Some(wire) = config.boot.clone() {
        let settings = wire.settings(&data_dir).context("config boot")?;
        let metrics = crate::http::boot::BootMetrics::default();
        registry.with_registry(|r| metrics.register_into(r));
        crate::http::boot::start(
            settings,
            crate::http::boot::BootDeps {
                store: store.clone(),
                directory: directory.clone(),
                recorder: recorder.clone(),
                ignition: Arc::new(crate::http::boot::renderer::Renderer {
                    store: store.clone(),
                }),
                leases: lease_view.map(|v| Arc::new(v) as Arc<dyn crate::http::boot::LeaseLookup>),
                metrics,
            },
            &mut tasks,
            cancel.clone(),
        )
        .await?;
    }

    // ---- Controllers start here (machine, machineset). ----
    // They take `store`, `registry` and a child of `cancel` and run in
    // `tasks`.
    let controller_config = config.controller.clone().unwrap_or_default();
    let controller = controller_config.validate().context("config controller")?;
    let bmc_settings =
        crate::bmc::quirks::BmcSettings::try_from(config.bmc.clone().unwrap_or_default())
            .context("config")?;
    if controller_config.enabled {
        let runner_metrics = crate::controller::runner::RunnerMetrics::default();
        registry.with_registry(|r| runner_metrics.register(r));
        crate::controller::start::start_machine_controller(
            store.clone(),
            controller,
            bmc_settings.quirks.clone(),
            runner_metrics.clone(),
            lease_releaser.map(|r| {
                Arc::new(r) as Arc<dyn crate::controller::machine::execute::AddressReleaser>
            }),
            &mut tasks,
            cancel.clone(),
        )
        .await?;
        let set_metrics = runner_metrics;
        crate::controller::machine_set::start::start_machine_set_controller(
            store.clone(),
            controller_config.kubeconfig.is_some(),
            set_metrics,
            &mut tasks,
            cancel.clone(),
        );
    } else {
        tracing::info!("machine controller disabled by config");
    }

    let state = ApiState {
        store: store.clone(),
        cancel: cancel.clone(),
        metrics: api_metrics.clone(),
    };
    let protected =
        crate::http::api::routes(state).merge(crate::http::ops::metrics_routes(registry.clone()));
    // The web page is public: it holds no data and calls the API with the
    // user's token.
    let app = crate::http::api::protect(
        protected,
        crate::http::ops::health_routes().merge(crate::http::ui::router()),
        &token,
        api_metrics,
    );

    spawn_signal_handler(cancel.clone())?;
    tracing::info!(
        listen = %bound,
        data_dir = %data_dir.display(),
        "metalherd serving (token in {})",
        data_dir.join(TOKEN_FILE).display()
    );
    let shutdown = cancel.clone();
    let served = axum::serve(crate::http::no_delay(listener), app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    // Whatever ended the server ends everything else too.
    cancel.cancel();
    let drained =
        tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!("services did not stop within {DRAIN:?}; exiting anyway");
        tasks.abort_all();
    }
    served.context("API server")?;
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

/// Create the data directory and prove it is writable, with one clear line
/// when it is not.
pub fn prepare_data_dir(dir: &Path) -> anyhow::Result<()> {
    let unwritable = |e: std::io::Error| {
        anyhow::anyhow!("data directory {} is not writable: {e}", dir.display())
    };
    std::fs::create_dir_all(dir).map_err(unwritable)?;
    let probe = dir.join(".write-test");
    std::fs::write(&probe, b"").map_err(unwritable)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Read the API token, or create a random one (mode 0600) on first start.
pub fn load_or_create_token(dir: &Path) -> anyhow::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = dir.join(TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => {
            // Tighten a token file someone loosened.
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
            return Ok(t.trim().to_string());
        }
        Ok(_) => {
            let _ = std::fs::remove_file(&path);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => anyhow::bail!("cannot read API token {}: {e}", path.display()),
    }
    let mut bytes = [0u8; 32];
    rand::Rng::fill(&mut rand::rng(), &mut bytes);
    let token = hex::encode(bytes);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot create API token {}", path.display()))?;
    f.write_all(format!("{token}\n").as_bytes())
        .with_context(|| format!("cannot write API token {}", path.display()))?;
    Ok(token)
}

/// Write the URL clients use to reach us (loopback for wildcard binds).
fn write_server_url(dir: &Path, bound: SocketAddr) -> anyhow::Result<()> {
    let host = match bound.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => "127.0.0.1".to_string(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V4(ip) => ip.to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
    };
    let url = format!("http://{host}:{}\n", bound.port());
    let path: PathBuf = dir.join(SERVER_URL_FILE);
    std::fs::write(&path, url).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_created_once_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let t1 = load_or_create_token(d.path()).unwrap();
        let t2 = load_or_create_token(d.path()).unwrap();
        assert_eq!(t1, t2);
        assert_eq!(t1.len(), 64);
        let mode = std::fs::metadata(d.path().join(TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn data_dir_under_a_file_is_refused_in_one_line() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("file");
        std::fs::write(&f, "").unwrap();
        let e = prepare_data_dir(&f.join("sub")).unwrap_err().to_string();
        assert!(e.starts_with("data directory "), "{e}");
        assert!(!e.contains('\n'));
    }
}
