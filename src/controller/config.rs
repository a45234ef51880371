//! Controller configuration (section `controller:` of the config file): the
//! wire type read from YAML, and [`ControllerSettings`] (`TryFrom<&ControllerConfig>`), turning it
//! into the runner settings, the lifecycle limits, the boot-storm limit and
//! the target cluster's kubeconfig.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::machine::Limits;
use super::queue::Backoff;
use super::runner::RunnerConfig;
use crate::cluster::DrainOptions;

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ControllerConfig {
    /// Run the Machine controller (on by default). Off leaves Machines to
    /// whoever else writes their status (API-only deployments, tests).
    pub enabled: bool,
    /// Reconciles running at once.
    pub concurrency: usize,
    /// Every machine is looked at again at least this often.
    pub resync_seconds: u64,
    /// Machines installing (provisioning, reimaging, wiping) at once; the
    /// rest wait in their phase with a `Waiting` condition. 0: no limit.
    pub boot_storm_limit: usize,
    /// Power-on to the installer's `installed` call-home.
    pub install_deadline_seconds: u64,
    /// `installed` to a Ready Node (or the `booted` call-home).
    pub join_deadline_seconds: u64,
    /// Failed boots in a row before a machine goes to Error.
    pub max_boot_attempts: u32,
    /// First wait after a failed boot; doubles up to `retryCapSeconds`.
    pub retry_base_seconds: u64,
    pub retry_cap_seconds: u64,
    /// A drain (evictions honouring PodDisruptionBudgets) must finish within this.
    pub drain_timeout_seconds: u64,
    /// How often to look while waiting for a boot, a Node or a power state.
    pub poll_seconds: u64,
    /// How long to wait before asking an unreachable BMC again.
    pub bmc_retry_seconds: u64,
    /// Per-request timeout towards a BMC.
    pub bmc_request_timeout_seconds: u64,
    /// How long a BMC power action may take to show in the power state.
    pub bmc_power_deadline_seconds: u64,
    /// Kubeconfig of the cluster the machines join. Without it, Node steps
    /// are skipped and the `booted` call-home stands in for Node readiness.
    pub kubeconfig: Option<PathBuf>,
    /// Events are deleted this long after their last occurrence.
    pub event_ttl_seconds: u64,
    /// Run the Cluster API infrastructure provider (MetalherdCluster,
    /// MetalherdMachine): needs `--store kubernetes` and Cluster API's
    /// CRDs in that cluster. Off by default.
    pub cluster_api: bool,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        let l = Limits::default();
        ControllerConfig {
            enabled: true,
            concurrency: 16,
            resync_seconds: l.resync.as_secs(),
            boot_storm_limit: 50,
            install_deadline_seconds: l.deadlines.install.as_secs(),
            join_deadline_seconds: l.deadlines.join.as_secs(),
            max_boot_attempts: l.max_boot_attempts,
            retry_base_seconds: l.retry_base.as_secs(),
            retry_cap_seconds: l.retry_cap.as_secs(),
            drain_timeout_seconds: DrainOptions::default().timeout.as_secs(),
            poll_seconds: l.poll.as_secs(),
            bmc_retry_seconds: l.bmc_retry.as_secs(),
            bmc_request_timeout_seconds: crate::bmc::Timing::default().request_timeout.as_secs(),
            bmc_power_deadline_seconds: crate::bmc::Timing::default().power_deadline.as_secs(),
            kubeconfig: None,
            event_ttl_seconds: 3600,
            cluster_api: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("controller config: {field}: {message}")]
pub struct ConfigError {
    pub field: &'static str,
    pub message: &'static str,
}

/// What the controller runs with.
#[derive(Clone, Debug)]
pub struct ControllerSettings {
    pub runner: RunnerConfig,
    pub limits: Limits,
    pub boot_storm_limit: usize,
    pub drain: DrainOptions,
    pub kubeconfig: Option<PathBuf>,
    pub bmc_timing: crate::bmc::Timing,
}

impl TryFrom<&ControllerConfig> for ControllerSettings {
    type Error = ConfigError;

    fn try_from(c: &ControllerConfig) -> Result<ControllerSettings, ConfigError> {
        c.settings()
    }
}

impl ControllerConfig {
    fn settings(&self) -> Result<ControllerSettings, ConfigError> {
        let err = |field, message| Err(ConfigError { field, message });
        if self.concurrency == 0 {
            return err("concurrency", "must be at least 1");
        }
        for (field, v) in [
            ("resyncSeconds", self.resync_seconds),
            ("installDeadlineSeconds", self.install_deadline_seconds),
            ("joinDeadlineSeconds", self.join_deadline_seconds),
            ("retryBaseSeconds", self.retry_base_seconds),
            ("drainTimeoutSeconds", self.drain_timeout_seconds),
            ("pollSeconds", self.poll_seconds),
            ("bmcRetrySeconds", self.bmc_retry_seconds),
            ("bmcRequestTimeoutSeconds", self.bmc_request_timeout_seconds),
            ("bmcPowerDeadlineSeconds", self.bmc_power_deadline_seconds),
            ("eventTtlSeconds", self.event_ttl_seconds),
        ] {
            if v == 0 {
                return err(field, "must be at least 1");
            }
        }
        if self.retry_cap_seconds < self.retry_base_seconds {
            return err("retryCapSeconds", "must be at least retryBaseSeconds");
        }
        if self.max_boot_attempts == 0 {
            return err("maxBootAttempts", "must be at least 1");
        }
        let secs = Duration::from_secs;
        let limits = Limits {
            deadlines: crate::api::boot::BootDeadlines {
                install: secs(self.install_deadline_seconds),
                join: secs(self.join_deadline_seconds),
            },
            resync: secs(self.resync_seconds),
            retry_base: secs(self.retry_base_seconds),
            retry_cap: secs(self.retry_cap_seconds),
            max_boot_attempts: self.max_boot_attempts,
            poll: secs(self.poll_seconds),
            bmc_retry: secs(self.bmc_retry_seconds),
            // Freed slots wake their waiters; this is only the safety net.
            slot_wait: Limits::default().slot_wait.min(secs(self.resync_seconds)),
        };
        Ok(ControllerSettings {
            runner: RunnerConfig {
                concurrency: self.concurrency,
                resync: limits.resync,
                backoff: Backoff::default(),
                ..RunnerConfig::default()
            },
            limits,
            boot_storm_limit: self.boot_storm_limit,
            drain: DrainOptions {
                timeout: secs(self.drain_timeout_seconds),
                ..DrainOptions::default()
            },
            kubeconfig: self.kubeconfig.clone(),
            bmc_timing: crate::bmc::Timing {
                request_timeout: secs(self.bmc_request_timeout_seconds),
                power_deadline: secs(self.bmc_power_deadline_seconds),
                ..crate::bmc::Timing::default()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<ControllerConfig, serde_yaml::Error> {
        serde_yaml::from_str(yaml)
    }

    #[test]
    fn defaults_validate() {
        let s = ControllerSettings::try_from(&ControllerConfig::default()).unwrap();
        assert_eq!(s.boot_storm_limit, 50);
        assert_eq!(s.limits, Limits::default());
        assert_eq!(s.runner.concurrency, 16);
        assert!(s.kubeconfig.is_none());
    }

    #[test]
    fn yaml_sets_fields_and_keeps_defaults() {
        let c = parse("bootStormLimit: 500\ninstallDeadlineSeconds: 900\nkubeconfig: /etc/metalherd/target.kubeconfig\n")
            .unwrap();
        let s = ControllerSettings::try_from(&c).unwrap();
        assert_eq!(s.boot_storm_limit, 500);
        assert_eq!(s.limits.deadlines.install, Duration::from_secs(900));
        assert_eq!(s.limits.deadlines.join, Limits::default().deadlines.join);
        assert_eq!(
            s.kubeconfig.as_deref(),
            Some(std::path::Path::new("/etc/metalherd/target.kubeconfig"))
        );
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused() {
        assert!(parse("bootstormlimit: 5\n").is_err());
        for (yaml, field) in [
            ("concurrency: 0\n", "concurrency"),
            ("installDeadlineSeconds: 0\n", "installDeadlineSeconds"),
            (
                "retryBaseSeconds: 60\nretryCapSeconds: 30\n",
                "retryCapSeconds",
            ),
            ("maxBootAttempts: 0\n", "maxBootAttempts"),
        ] {
            let e = ControllerSettings::try_from(&parse(yaml).unwrap()).unwrap_err();
            assert_eq!(e.field, field, "{yaml}");
        }
    }
}
