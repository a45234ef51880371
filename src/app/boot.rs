//! Starting the boot services: the boot directory and its recorder, DHCP,
//! TFTP, boot HTTP (iPXE, assets, Ignition, call-home) and the IPv6 router
//! advertisement. Each binds its socket here (fail fast) and runs in the
//! shared `JoinSet` under the shared cancellation token.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigFile;
use crate::http::ops::MetricsRegistry;
use crate::store::Store;

/// What the boot services hand on to the controllers.
pub(super) struct Started {
    /// Frees a machine's DHCP lease when it is retired (DHCP running here).
    pub lease_releaser: Option<crate::dhcp::server::LeaseReleaser>,
    /// Serves firmware images to BMCs (boot HTTP running here).
    pub firmware: Option<Arc<dyn crate::controller::machine::execute::FirmwareImages>>,
}

pub(super) async fn start(
    config: &ConfigFile,
    data_dir: &Path,
    store: &Arc<dyn Store>,
    registry: &MetricsRegistry,
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
    leader_elected: bool,
) -> anyhow::Result<Started> {
    // The boot directory: MAC/IP -> Machine index for the boot services.
    let directory = crate::directory::Directory::new();
    tasks.spawn(directory.clone().run(store.clone(), cancel.clone()));
    let recorder = crate::directory::BootRecorder::spawn_in(store.clone(), cancel.clone(), tasks);

    let mut lease_releaser = None;
    let mut lease_view = None;
    if let Some(wire) = config.dhcp.clone() {
        let metrics = crate::dhcp::metrics::DhcpMetrics::default();
        registry.with_registry(|r| metrics.register(r));
        let mut settings = crate::dhcp::DhcpSettings::try_from(wire).context("config dhcp")?;
        settings.ping_check = Some(settings.ping_check_for(leader_elected));
        let discovered = crate::discovery::Limits {
            cap: settings.discovered_cap,
            ttl: std::time::Duration::from_secs(settings.discovered_ttl),
        };
        let bound = crate::dhcp::server::BoundServer::bind(settings, data_dir).await?;
        lease_releaser = Some(bound.releaser());
        lease_view = Some(bound.lease_view());
        let (st, dir, rec, c) = (
            Some(crate::discovery::spawn_with(
                store.clone(),
                discovered,
                cancel.clone(),
            )),
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

    let mut lease_view6 = None;
    if let Some(wire) = config.dhcp6.clone() {
        let metrics = crate::dhcp::v6::metrics::Dhcp6Metrics::default();
        registry.with_registry(|r| metrics.register(r));
        let settings = crate::dhcp::v6::Dhcp6Settings::try_from(wire).context("config dhcp6")?;
        let bound = crate::dhcp::v6::server::BoundServer6::bind(settings, data_dir).await?;
        lease_view6 = Some(bound.lease_view());
        let (dir, rec, c) = (directory.clone(), recorder.clone(), cancel.clone());
        tasks.spawn(async move {
            if let Err(e) = bound.serve(dir, rec, metrics, c.clone()).await {
                tracing::error!(error = %e, "DHCPv6 server stopped");
                c.cancel();
            }
        });
    }

    let boot_settings = match config.boot.clone() {
        Some(wire) => {
            // Tokens outlive the install deadline the controller runs with.
            let deadline = config
                .controller
                .as_ref()
                .map(|c| std::time::Duration::from_secs(c.install_deadline_seconds))
                .unwrap_or(crate::api::boot::BootDeadlines::default().install);
            Some(
                wire.settings_for(data_dir, deadline)
                    .context("config boot")?,
            )
        }
        None => None,
    };

    let mut firmware = None;
    let mut boot_state = None;
    if let Some(settings) = boot_settings {
        let metrics = crate::http::boot::BootMetrics::default();
        registry.with_registry(|r| metrics.register_into(r));
        let ra = settings.router_advertisement.clone();
        firmware = Some(Arc::new(super::firmware::CachedFirmware {
            cache: crate::files::cache::ImageCache::new(
                settings.data_dir.join(crate::datadir::IMAGE_CACHE_DIR),
            ),
            base_url: settings.base_url.clone(),
            // The file boot HTTP loads too (created here when absent).
            key: crate::http::boot::token::TokenKey::load_or_create(&settings.data_dir)
                .context("boot token key")?,
        })
            as Arc<dyn crate::controller::machine::execute::FirmwareImages>);
        boot_state = Some(
            crate::http::boot::start(
                settings,
                crate::http::boot::BootDeps {
                    store: store.clone(),
                    directory: directory.clone(),
                    recorder: recorder.clone(),
                    ignition: Arc::new(crate::http::boot::renderer::Renderer {
                        store: store.clone(),
                    }),
                    leases: dhcp_leases(lease_view, lease_view6),
                    metrics,
                },
                tasks,
                cancel.clone(),
            )
            .await?,
        );
        if let Some(ra) = ra {
            tasks.spawn(crate::ra::run(ra, cancel.clone()));
        }
    }
    if let Some(wire) = config.tftp.clone() {
        let metrics = crate::tftp::TftpMetrics::default();
        registry.with_registry(|r| metrics.register(r));
        let settings = crate::tftp::TftpSettings::try_from(&wire).context("config tftp")?;
        let dir = crate::files::DirSource::new(&settings.root)
            .with_context(|| format!("config tftp.root {}", settings.root.display()))?;
        // With boot HTTP here, a Secure Boot machine's GRUB gets its
        // configuration and images over TFTP too.
        let source: Arc<dyn crate::files::FileSource> = match &boot_state {
            Some(st) => Arc::new(
                crate::http::boot::tftp_boot::TftpBoot::new(st.clone(), Arc::new(dir))
                    .context("config tftp")?,
            ),
            None => Arc::new(dir),
        };
        let bound = crate::tftp::bind(&settings)?;
        let events = Arc::new(crate::tftp::BootTimeline {
            directory: directory.clone(),
            recorder: recorder.clone(),
        });
        tasks.spawn(bound.serve(source, events, metrics, cancel.clone()));
    }

    Ok(Started {
        lease_releaser,
        firmware,
    })
}

/// What boot HTTP asks for a Machine's leased addresses: the DHCPv4 and
/// the DHCPv6 server's views, whichever run here.
fn dhcp_leases(
    v4: Option<crate::dhcp::LeaseView>,
    v6: Option<crate::dhcp::v6::LeaseView6>,
) -> Option<Arc<dyn crate::http::boot::LeaseLookup>> {
    let mut all: Vec<Arc<dyn crate::http::boot::LeaseLookup>> = Vec::new();
    all.extend(v4.map(|v| Arc::new(v) as Arc<dyn crate::http::boot::LeaseLookup>));
    all.extend(v6.map(|v| Arc::new(Leases6(v)) as Arc<dyn crate::http::boot::LeaseLookup>));
    match all.len() {
        0 => None,
        1 => all.pop(),
        _ => Some(Arc::new(crate::http::boot::LeaseLookups(all))),
    }
}

/// The DHCPv6 server's bound, unexpired leases, as boot HTTP asks for them.
struct Leases6(crate::dhcp::v6::LeaseView6);

impl crate::http::boot::LeaseLookup for Leases6 {
    fn addresses_of(&self, mac: &[u8; 6]) -> Vec<std::net::IpAddr> {
        self.0
            .addresses_of(mac, crate::dhcp::server::unix_now())
            .into_iter()
            .map(std::net::IpAddr::V6)
            .collect()
    }
}
