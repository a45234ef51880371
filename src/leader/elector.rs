//! The edge of leader election: reads and writes the Lease through the
//! [`Store`] (a `coordination.k8s.io/v1` Lease on the cluster's API, with a
//! resourceVersion precondition on every update, so of two replicas racing
//! from one version one gets a conflict), asks [`decide`] what to do, and
//! publishes whether this replica leads on a `watch` channel: the fence
//! everything that acts checks.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::decide::{Decision, LostBecause, Observed, Timing, decide};
use crate::api::Kind;
use crate::store::{Store, StoreError};

/// Where the Lease is and who we are.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub timing: Timing,
}

/// How a run ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// We led and lost the Lease: everything that acted must have stopped.
    Lost(LostBecause),
    /// Shut down (the Lease released if we held it).
    Cancelled,
}

/// `<hostname>-<pid>`: unique per process, readable in `kubectl get lease`.
pub fn default_identity() -> String {
    // In a Pod the hostname is the Pod's name.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "metalherd".into());
    format!("{host}-{}", std::process::id())
}

/// Holder and renewTime: the record whose change restarts a standby's
/// expiry clock.
type Record = (Option<String>, Option<String>);

fn record(lease: &Value) -> Record {
    let spec = &lease["spec"];
    (
        spec["holderIdentity"].as_str().map(str::to_string),
        spec["renewTime"].as_str().map(str::to_string),
    )
}

fn micro_time() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

pub struct Elector {
    store: Arc<dyn Store>,
    me: Candidate,
    leading: watch::Sender<bool>,
    gauge: Gauge,
}

impl Elector {
    /// An elector and the fence it keeps (`true` while we lead).
    pub fn new(store: Arc<dyn Store>, me: Candidate) -> (Elector, watch::Receiver<bool>) {
        let (leading, rx) = watch::channel(false);
        let e = Elector {
            store,
            me,
            leading,
            gauge: Gauge::default(),
        };
        (e, rx)
    }

    /// `metalherd_leader`: 1 while this replica leads.
    pub fn gauge(&self) -> Gauge {
        self.gauge.clone()
    }

    fn set_leading(&self, v: bool) {
        self.leading.send_replace(v);
        self.gauge.set(i64::from(v));
    }

    /// Run until the Lease is lost or `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) -> Ended {
        let mut seen: Option<(Record, Instant)> = None;
        let mut last_renew: Option<Instant> = None;
        let timing = self.me.timing;
        loop {
            let current = match self
                .store
                .get(Kind::Lease, &self.me.namespace, &self.me.name)
                .await
            {
                Ok(v) => Some(v),
                Err(e) if e.is_not_found() => None,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the leader Lease");
                    // Nothing known: a leader may still renew blind until
                    // its deadline; a standby just waits.
                    if let Some(renewed) = last_renew
                        && let Decision::Lost(why) = decide(
                            None,
                            &self.me.identity,
                            Some(renewed),
                            &timing,
                            Instant::now(),
                        )
                    {
                        return self.lose(why);
                    }
                    if self.sleep(&cancel).await {
                        return self.cancelled(None).await;
                    }
                    continue;
                }
            };
            let now = Instant::now();
            let observed = current.as_ref().map(|l| {
                let r = record(l);
                let at = match &seen {
                    Some((prev, at)) if *prev == r => *at,
                    _ => now,
                };
                seen = Some((r.clone(), at));
                Observed {
                    holder: r.0,
                    lease_duration: std::time::Duration::from_secs(
                        l["spec"]["leaseDurationSeconds"]
                            .as_u64()
                            .unwrap_or(timing.lease_duration.as_secs()),
                    ),
                    observed_at: at,
                }
            });
            match decide(
                observed.as_ref(),
                &self.me.identity,
                last_renew,
                &timing,
                now,
            ) {
                Decision::Lost(why) => return self.lose(why),
                Decision::StandBy { holder } => {
                    tracing::debug!(%holder, "standing by");
                }
                d @ (Decision::Acquire | Decision::Renew) => {
                    let acquiring = d == Decision::Acquire;
                    match self.write(current, acquiring).await {
                        Ok(_) => {
                            if acquiring {
                                tracing::info!(identity = %self.me.identity, lease = %self.me.name, "became the leader");
                            }
                            last_renew = Some(now);
                            self.set_leading(true);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, acquiring, "leader Lease write failed")
                        }
                    }
                }
            }
            if self.sleep(&cancel).await {
                return self.cancelled(last_renew).await;
            }
        }
    }

    /// Wait one retry period; true when cancelled.
    async fn sleep(&self, cancel: &CancellationToken) -> bool {
        tokio::select! {
            _ = cancel.cancelled() => true,
            _ = tokio::time::sleep(self.me.timing.retry_period) => false,
        }
    }

    fn lose(&self, why: LostBecause) -> Ended {
        // The fence first: nothing acts after this line.
        self.set_leading(false);
        tracing::warn!(reason = ?why, "lost the leader Lease; stopping");
        Ended::Lost(why)
    }

    /// On shutdown a leader releases the Lease so a standby need not wait
    /// for it to expire (client-go's ReleaseOnCancel).
    async fn cancelled(&self, last_renew: Option<Instant>) -> Ended {
        let was_leading = last_renew.is_some();
        self.set_leading(false);
        if was_leading
            && let Ok(mut cur) = self
                .store
                .get(Kind::Lease, &self.me.namespace, &self.me.name)
                .await
            && cur["spec"]["holderIdentity"] == self.me.identity.as_str()
        {
            cur["spec"]["holderIdentity"] = json!("");
            if let Err(e) = self.store.update(Kind::Lease, cur).await {
                tracing::warn!(error = %e, "cannot release the leader Lease");
            }
        }
        Ended::Cancelled
    }

    /// Create or update the Lease naming us, from the version we read.
    async fn write(&self, current: Option<Value>, acquiring: bool) -> Result<Value, StoreError> {
        let now = micro_time();
        let secs = self.me.timing.lease_duration.as_secs().max(1);
        match current {
            None => {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.me.name, "namespace": self.me.namespace},
                    "spec": {"holderIdentity": self.me.identity, "leaseDurationSeconds": secs,
                             "acquireTime": now, "renewTime": now, "leaseTransitions": 0},
                });
                self.store.create(Kind::Lease, lease).await
            }
            Some(mut lease) => {
                let spec = &mut lease["spec"];
                if acquiring {
                    let moved = spec["holderIdentity"]
                        .as_str()
                        .is_some_and(|h| !h.is_empty() && h != self.me.identity);
                    let transitions = spec["leaseTransitions"].as_u64().unwrap_or(0);
                    spec["leaseTransitions"] = json!(transitions + u64::from(moved));
                    spec["acquireTime"] = json!(now);
                    spec["holderIdentity"] = json!(self.me.identity);
                    spec["leaseDurationSeconds"] = json!(secs);
                }
                spec["renewTime"] = json!(now);
                // The read's resourceVersion stays: a race is a conflict.
                self.store.update(Kind::Lease, lease).await
            }
        }
    }
}
