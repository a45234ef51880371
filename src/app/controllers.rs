//! Starting the controllers (the Machine and MachineSet controllers) from the
//! config file's `controller:` and `bmc:` sections, in the shared `JoinSet` under the
//! shared cancellation token.

use std::sync::Arc;

use anyhow::Context;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigFile;
use crate::http::ops::MetricsRegistry;
use crate::store::Store;

pub(super) async fn start(
    config: &ConfigFile,
    store: &Arc<dyn Store>,
    registry: &MetricsRegistry,
    started: super::boot::Started,
    fence: Option<tokio::sync::watch::Receiver<bool>>,
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    let controller_config = config.controller.clone().unwrap_or_default();
    let controller = crate::controller::config::ControllerSettings::try_from(&controller_config)
        .context("config controller")?;
    let bmc_settings =
        crate::bmc::quirks::BmcSettings::try_from(config.bmc.clone().unwrap_or_default())
            .context("config")?;
    // Events come from the boot services too: they expire with or without
    // the Machine controller.
    tasks.spawn(crate::store::events::expire_loop(
        store.clone(),
        std::time::Duration::from_secs(controller_config.event_ttl_seconds),
        cancel.clone(),
    ));
    if !controller_config.enabled {
        tracing::info!("machine controller disabled by config");
        return Ok(());
    }
    let runner_metrics = crate::controller::runner::RunnerMetrics::default();
    registry.with_registry(|r| {
        runner_metrics.register(r);
        crate::controller::machine_set::metrics::register(r);
    });
    crate::controller::start::start_machine_controller(
        store.clone(),
        controller,
        bmc_settings.quirks.clone(),
        runner_metrics.clone(),
        started
            .lease_releaser
            .map(|r| Arc::new(r) as Arc<dyn crate::controller::machine::execute::AddressReleaser>),
        started.firmware,
        fence,
        tasks,
        cancel.clone(),
    )
    .await?;
    if controller_config.cluster_api {
        let Some(kube) = &config.kube_store else {
            anyhow::bail!("config controller.clusterApi: needs --store kubernetes");
        };
        let client = crate::capi::start::client(kube.kubeconfig.as_deref())
            .await
            .context("config controller.clusterApi")?;
        tasks.spawn(crate::capi::start::run(
            client,
            kube.namespace.clone(),
            std::time::Duration::from_secs(controller_config.resync_seconds.clamp(1, 30)),
            cancel.clone(),
        ));
    }
    crate::controller::machine_set::start::start_machine_set_controller(
        store.clone(),
        controller_config.kubeconfig.is_some(),
        runner_metrics,
        tasks,
        cancel.clone(),
    );
    Ok(())
}
