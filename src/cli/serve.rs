//! The flags of `metalherd serve` (the composition root runs them).

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the API server.
    #[arg(long, env = "METALHERD_LISTEN", default_value = "127.0.0.1:7080")]
    pub listen: String,
    /// Names or addresses clients reach the API by, beyond the listen
    /// address and localhost (added to the generated server certificate).
    #[arg(long, env = "METALHERD_ADVERTISE_ADDRESS", value_delimiter = ',')]
    pub advertise_address: Vec<String>,
    /// Serve this certificate chain (PEM) instead of the generated one.
    #[arg(long, env = "METALHERD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "METALHERD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
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
    /// Where objects live: `embedded` (one file in the data directory) or
    /// `kubernetes` (resources on a Kubernetes API server; nothing is kept
    /// here).
    #[arg(long, env = "METALHERD_STORE", value_enum, default_value_t = StoreBackend::Embedded)]
    pub store: StoreBackend,
    /// With `--store kubernetes`: the kubeconfig file to reach the API
    /// server with (its current context); the Pod's in-cluster
    /// configuration when absent.
    #[arg(long, env = "METALHERD_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// With `--store kubernetes`: read and watch only this namespace
    /// (a namespaced Role is then enough); all namespaces when absent.
    #[arg(long, env = "METALHERD_WATCH_NAMESPACE", value_name = "NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// With `--store kubernetes` (default on there): replicas elect a
    /// leader on a Lease; only the leader runs the controllers and the
    /// boot services, the others serve the API and stand by.
    #[arg(long, env = "METALHERD_LEADER_ELECT", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: Option<bool>,
    /// The Lease leader election competes for.
    #[arg(long, env = "METALHERD_LEASE_NAME", default_value = "metalherd")]
    pub lease_name: String,
    /// The Lease's namespace, also that of the boot-token key Secret
    /// (default: --watch-namespace, else `default`).
    #[arg(long, env = "METALHERD_LEASE_NAMESPACE", value_name = "NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long the Lease holds without a renew (e.g. 15s).
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    pub leader_lease_duration: std::time::Duration,
    /// How long a leader keeps acting without a successful renew; shorter
    /// than the lease duration.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub leader_renew_deadline: std::time::Duration,
    /// How often the Lease is read and renewed (e.g. 2s, 500ms).
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub leader_retry_period: std::time::Duration,
}

/// `500ms` or `15s`.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (n, unit) = match s.strip_suffix("ms") {
        Some(n) => (n, 1),
        None => (
            s.strip_suffix('s')
                .ok_or_else(|| format!("{s:?}: give a duration like 15s or 500ms"))?,
            1000,
        ),
    };
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: give a duration like 15s or 500ms"))?;
    Ok(std::time::Duration::from_millis(n * unit))
}

/// `serve` flags that do not go together.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ServeFlagsError {
    #[error("--kubeconfig and --watch-namespace need --store kubernetes")]
    KubernetesFlagsWithoutKubernetes,
    #[error("--leader-elect needs --store kubernetes")]
    LeaderElectWithoutKubernetes,
    #[error(transparent)]
    LeaderTiming(#[from] crate::leader::TimingError),
}

/// The store backends `serve` can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreBackend {
    Embedded,
    Kubernetes,
}

impl ServeArgs {
    /// The store to open: the data directory's file, or the API server.
    /// Kubernetes flags without `--store kubernetes` are a mistake worth
    /// stopping on.
    pub fn store_config(
        &self,
        data_dir: &std::path::Path,
    ) -> Result<crate::store::StoreConfig, ServeFlagsError> {
        use crate::store::StoreConfig;
        match self.store {
            StoreBackend::Embedded => {
                if self.kubeconfig.is_some() || self.watch_namespace.is_some() {
                    return Err(ServeFlagsError::KubernetesFlagsWithoutKubernetes);
                }
                Ok(StoreConfig::Embedded {
                    path: data_dir.join(crate::datadir::STORE_FILE),
                    // The config file's `store.watchHistory` replaces it.
                    history: crate::store::embedded::DEFAULT_HISTORY,
                })
            }
            StoreBackend::Kubernetes => Ok(StoreConfig::Kubernetes {
                kubeconfig: self.kubeconfig.clone(),
                namespace: self.watch_namespace.clone(),
            }),
        }
    }

    /// The leader election to run: `None` in standalone mode or when
    /// turned off. Bad durations stop here.
    pub fn leader_election(&self) -> Result<Option<crate::leader::Candidate>, ServeFlagsError> {
        let on = match (self.store, self.leader_elect) {
            (StoreBackend::Embedded, Some(true)) => {
                return Err(ServeFlagsError::LeaderElectWithoutKubernetes);
            }
            (StoreBackend::Embedded, _) | (_, Some(false)) => false,
            (StoreBackend::Kubernetes, _) => true,
        };
        if !on {
            return Ok(None);
        }
        let timing = crate::leader::Timing::new(
            self.leader_lease_duration,
            self.leader_renew_deadline,
            self.leader_retry_period,
        )?;
        Ok(Some(crate::leader::Candidate {
            namespace: self
                .lease_namespace
                .clone()
                .or_else(|| self.watch_namespace.clone())
                .unwrap_or_else(|| "default".into()),
            name: self.lease_name.clone(),
            identity: crate::leader::default_identity(),
            timing,
        }))
    }

    /// The DHCP flags, to lay over the config file's `dhcp:` section.
    pub fn dhcp_flags(&self) -> crate::dhcp::flags::DhcpFlags {
        crate::dhcp::flags::DhcpFlags {
            interface: self.dhcp_interface.clone(),
            mode: self.dhcp_mode.clone(),
            server_address: self.dhcp_server_address.clone(),
            lease_sync: self.dhcp_lease_sync.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::store::StoreConfig;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn config(args: &[&str]) -> Result<StoreConfig, String> {
        let cli = Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.serve
            .store_config(std::path::Path::new("/data"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_store_flags_pick_the_backend() {
        assert!(matches!(
            config(&[]),
            Ok(StoreConfig::Embedded { path, .. }) if path == std::path::Path::new("/data/metalherd.redb")
        ));
        assert!(matches!(
            config(&["--store", "kubernetes", "--kubeconfig", "/k", "--watch-namespace", "lab"]),
            Ok(StoreConfig::Kubernetes { kubeconfig: Some(k), namespace: Some(n) })
                if k == std::path::Path::new("/k") && n == "lab"
        ));
        assert!(matches!(
            config(&["--store", "kubernetes"]),
            Ok(StoreConfig::Kubernetes {
                kubeconfig: None,
                namespace: None
            })
        ));
        let e = config(&["--kubeconfig", "/k"]).unwrap_err();
        assert!(e.contains("--store kubernetes"), "{e}");
        assert!(config(&["--store", "etcd"]).is_err());
    }

    fn election(args: &[&str]) -> Result<Option<crate::leader::Candidate>, String> {
        let cli = Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.serve.leader_election().map_err(|e| e.to_string())
    }

    #[test]
    fn leader_election_is_on_in_kubernetes_mode_only() {
        assert!(election(&[]).unwrap().is_none());
        assert!(election(&["--leader-elect"]).is_err());
        let c = election(&["--store", "kubernetes", "--watch-namespace", "lab"])
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.namespace.as_str(), c.name.as_str()),
            ("lab", "metalherd")
        );
        assert_eq!(c.timing, crate::leader::Timing::default());
        assert!(
            election(&["--store", "kubernetes", "--leader-elect=false"])
                .unwrap()
                .is_none()
        );
        let c = election(&[
            "--store",
            "kubernetes",
            "--lease-name",
            "x",
            "--lease-namespace",
            "ops",
            "--leader-lease-duration",
            "3s",
            "--leader-renew-deadline",
            "2s",
            "--leader-retry-period",
            "500ms",
        ])
        .unwrap()
        .unwrap();
        assert_eq!((c.namespace.as_str(), c.name.as_str()), ("ops", "x"));
        assert_eq!(c.timing.retry_period, std::time::Duration::from_millis(500));
        let e = election(&["--store", "kubernetes", "--leader-renew-deadline", "20s"]).unwrap_err();
        assert!(e.contains("shorter than the lease duration"), "{e}");
        assert!(election(&["--store", "kubernetes", "--leader-retry-period", "2"]).is_err());
    }
}
