//! A replica under leader election: the elector runs for the life of the
//! process; the boot services and controllers start only once the Lease is
//! ours, under their own token, and that token is cancelled the moment the
//! Lease is lost (the elector has already closed the BMC fence by then).
//! A replica that lost the Lease then shuts down altogether, to be
//! restarted as a standby: nothing it started lingers.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::ConfigFile;
use crate::http::ops::MetricsRegistry;
use crate::leader::{Elector, Ended};
use crate::store::Store;

/// What the leader starts.
pub(super) struct Acting {
    pub config: ConfigFile,
    pub data_dir: PathBuf,
    pub store: Arc<dyn Store>,
    pub registry: MetricsRegistry,
}

pub(super) async fn run(
    elector: Elector,
    mut leading: watch::Receiver<bool>,
    acting: Acting,
    lost: Arc<AtomicBool>,
    cancel: CancellationToken,
) {
    let mut election = tokio::spawn(elector.run(cancel.clone()));
    let won = tokio::select! {
        r = leading.wait_for(|l| *l) => r.is_ok(),
        _ = cancel.cancelled() => false,
        _ = &mut election => false,
    };
    let token = cancel.child_token();
    let mut tasks: JoinSet<()> = JoinSet::new();
    if won {
        tracing::info!("leading: starting the boot services and controllers");
        if let Err(e) = start(&acting, leading.clone(), &mut tasks, &token).await {
            tracing::error!(error = %format!("{e:#}"), "cannot start as leader");
            cancel.cancel();
        }
    }
    let ended = if election.is_finished() {
        // Already ended above (lost before acting, or shut down).
        Ended::Cancelled
    } else {
        match election.await {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "leader election task failed");
                lost.store(true, Ordering::SeqCst);
                Ended::Cancelled
            }
        }
    };
    // The fence is already closed; now stop everything that acts.
    token.cancel();
    if let Ended::Lost(_) = ended {
        lost.store(true, Ordering::SeqCst);
        cancel.cancel();
    }
    while tasks.join_next().await.is_some() {}
}

async fn start(
    a: &Acting,
    fence: watch::Receiver<bool>,
    tasks: &mut JoinSet<()>,
    token: &CancellationToken,
) -> anyhow::Result<()> {
    let started = super::boot::start(
        &a.config,
        &a.data_dir,
        &a.store,
        &a.registry,
        tasks,
        token,
        true,
    )
    .await?;
    super::controllers::start(
        &a.config,
        &a.store,
        &a.registry,
        started,
        Some(fence),
        tasks,
        token,
    )
    .await
}
