//! MachineSet metrics: rollouts by outcome, batch durations by kind and
//! outcome, and each set's machines out of service. What changed is read
//! from the status before and after a reconcile ([`changes`], pure), and
//! recorded only once that status is written, so a retried reconcile does
//! not count twice. One process-wide set, registered by [`register`].

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::api::machine_set::{Batch, MachineSetStatus, RolloutState};

/// The `outcome` of a failed rollout or batch (a metric label, not a boot
/// outcome).
pub const FAILED: &str = "failed";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// Rollouts: `complete`, `failed`, `rolled_back`; remediations: see
    /// [`REMEDIATION_OUTCOMES`].
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchLabels {
    /// `update` or `rollback`.
    pub kind: &'static str,
    /// `passed` or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SetLabels {
    /// `namespace/name`.
    pub machineset: String,
}

type BatchHistogram = Family<BatchLabels, Histogram, fn() -> Histogram>;

pub struct SetMetrics {
    pub rollouts: Family<OutcomeLabels, Counter>,
    pub remediations: Family<OutcomeLabels, Counter>,
    pub batch_seconds: BatchHistogram,
    pub out_of_service: Family<SetLabels, Gauge>,
}

fn batch_histogram() -> Histogram {
    Histogram::new([
        10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0,
    ])
}

static METRICS: LazyLock<SetMetrics> = LazyLock::new(|| SetMetrics {
    rollouts: Family::default(),
    remediations: Family::default(),
    batch_seconds: Family::new_with_constructor(batch_histogram),
    out_of_service: Family::default(),
});

pub fn global() -> &'static SetMetrics {
    &METRICS
}

/// Add the MachineSet metrics to a registry (names under its prefix).
pub fn register(registry: &mut Registry) {
    let m = global();
    // Every known label value from the start, at zero, so a rate over a
    // first failure is not lost.
    for outcome in ["complete", FAILED, "rolled_back"] {
        let _ = m.rollouts.get_or_create(&OutcomeLabels { outcome });
    }
    for outcome in REMEDIATION_OUTCOMES {
        let _ = m.remediations.get_or_create(&OutcomeLabels { outcome });
    }
    for kind in ["update", "rollback"] {
        for outcome in ["passed", FAILED] {
            let _ = m
                .batch_seconds
                .get_or_create(&BatchLabels { kind, outcome });
        }
    }
    registry.register(
        "machineset_rollouts",
        "MachineSet rollouts finished, by outcome (complete, failed, rolled_back)",
        m.rollouts.clone(),
    );
    registry.register(
        "machineset_remediations",
        "MachineSet remediation steps, by outcome (power_cycled, reimaged, recovered, exhausted, held: the maxUnhealthy breaker opened)",
        m.remediations.clone(),
    );
    registry.register(
        "machineset_batch_seconds",
        "Time from a batch's start to its gate passing or its failure, by kind (update, rollback) and outcome",
        m.batch_seconds.clone(),
    );
    registry.register(
        "machineset_machines_out_of_service",
        "A set's claimed machines not available (not Ready, or not yet through the health gate)",
        m.out_of_service.clone(),
    );
}

/// What one reconcile finished.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changes {
    /// A rollout ended with this outcome.
    pub rollout: Option<&'static str>,
    /// Batches that ended: (kind, outcome, seconds).
    pub batches: Vec<(&'static str, &'static str, f64)>,
    /// Machines out of service now.
    pub out_of_service: i64,
    /// Remediation steps taken or ended, one entry each.
    pub remediations: Vec<&'static str>,
}

/// The `outcome`s of `machineset_remediations`.
pub const REMEDIATION_OUTCOMES: [&str; 5] =
    ["power_cycled", "reimaged", "recovered", "exhausted", "held"];

/// Remediation steps between two statuses: actions by their counters, ends
/// by records that went (recovered: it had acted and was healthy again) or
/// gave up, and the breaker by its condition turning False.
fn remediation_changes(old: &MachineSetStatus, new: &MachineSetStatus) -> Vec<&'static str> {
    let mut out = Vec::new();
    for n in &new.remediations {
        let o = old.remediations.iter().find(|o| o.machine == n.machine);
        let (pc, ri, ex) = o.map_or((0, 0, false), |o| (o.power_cycles, o.reimages, o.exhausted));
        let more = |was: i32, now: i32| usize::try_from(now - was).unwrap_or(0);
        out.extend(std::iter::repeat_n(
            "power_cycled",
            more(pc, n.power_cycles),
        ));
        out.extend(std::iter::repeat_n("reimaged", more(ri, n.reimages)));
        if n.exhausted && !ex {
            out.push("exhausted");
        }
    }
    for o in &old.remediations {
        let gone = !new.remediations.iter().any(|n| n.machine == o.machine);
        if gone && o.last_action.is_some() && o.healthy_since.is_some() {
            out.push("recovered");
        }
    }
    let open = |s: &MachineSetStatus| {
        s.conditions.iter().any(|c| {
            c.type_ == super::plan::cond::REMEDIATION
                && c.status == crate::api::ConditionStatus::False
        })
    };
    if open(new) && !open(old) {
        out.push("held");
    }
    out
}

fn kind(b: &Batch) -> &'static str {
    if b.rollback { "rollback" } else { "update" }
}

fn secs(b: &Batch, end: jiff::Timestamp) -> f64 {
    let d = end.duration_since(b.started_at);
    d.as_secs_f64().max(0.0)
}

/// Compare the status before and after a reconcile.
pub fn changes(old: &MachineSetStatus, new: &MachineSetStatus) -> Changes {
    let mut c = Changes {
        out_of_service: i64::from(new.replicas.saturating_sub(new.available_replicas).max(0)),
        remediations: remediation_changes(old, new),
        ..Default::default()
    };
    if new.rollout_state != old.rollout_state {
        c.rollout = match new.rollout_state {
            Some(RolloutState::Complete) => Some("complete"),
            Some(RolloutState::Failed) => Some(FAILED),
            Some(RolloutState::RolledBack) => Some("rolled_back"),
            _ => None,
        };
    }
    let Some(b) = &old.current_batch else {
        return c;
    };
    let same =
        |x: &Batch| x.number == b.number && x.revision == b.revision && x.rollback == b.rollback;
    if new.current_batch.as_ref().is_some_and(same) {
        return c;
    }
    let passed = new.completed_batches.iter().find(|x| same(x));
    let failed = new
        .last_failure
        .as_ref()
        .filter(|f| Some(*f) != old.last_failure.as_ref());
    if let Some(done) = passed {
        let end = done.finished_at.unwrap_or(done.started_at);
        c.batches.push((kind(b), "passed", secs(b, end)));
    } else if let Some(f) = failed {
        c.batches.push((kind(b), FAILED, secs(b, f.at)));
    } else if new.rollout_state == Some(RolloutState::RolledBack) && b.rollback {
        // A rollback batch that passed is not kept in completedBatches.
        c.batches
            .push((kind(b), "passed", secs(b, new_finish(new, b))));
    }
    c
}

/// When a passed rollback batch finished: its RolledBack condition's time.
fn new_finish(new: &MachineSetStatus, b: &Batch) -> jiff::Timestamp {
    new.conditions
        .iter()
        .find(|c| c.reason == RolloutState::RolledBack.as_str())
        .map_or(b.started_at, |c| c.last_transition_time)
}

/// Record what a reconcile of `set` (`namespace/name`) finished.
pub fn record(set: &str, c: &Changes) {
    let m = global();
    if let Some(outcome) = c.rollout {
        m.rollouts.get_or_create(&OutcomeLabels { outcome }).inc();
    }
    for outcome in &c.remediations {
        m.remediations
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }
    for (kind, outcome, s) in &c.batches {
        m.batch_seconds
            .get_or_create(&BatchLabels { kind, outcome })
            .observe(*s);
    }
    m.out_of_service
        .get_or_create(&SetLabels {
            machineset: set.to_string(),
        })
        .set(c.out_of_service);
}

/// A set is gone: drop its gauge.
pub fn forget(set: &str) {
    global().out_of_service.remove(&SetLabels {
        machineset: set.to_string(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::machine_set::RolloutFailure;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn batch(n: i32, rev: i64, rollback: bool, start: i64) -> Batch {
        Batch {
            number: n,
            revision: rev,
            machines: vec![],
            started_at: t(start),
            rollback,
            finished_at: None,
        }
    }

    #[test]
    fn a_passed_batch_and_a_complete_rollout() {
        let old = MachineSetStatus {
            rollout_state: Some(RolloutState::Progressing),
            current_batch: Some(batch(2, 2, false, 100)),
            replicas: 4,
            available_replicas: 2,
            ..Default::default()
        };
        let mut done = batch(2, 2, false, 100);
        done.finished_at = Some(t(160));
        let new = MachineSetStatus {
            rollout_state: Some(RolloutState::Complete),
            completed_batches: vec![batch(1, 2, false, 0), done],
            replicas: 4,
            available_replicas: 4,
            ..Default::default()
        };
        let c = changes(&old, &new);
        assert_eq!(c.rollout, Some("complete"));
        assert_eq!(c.batches, [("update", "passed", 60.0)]);
        assert_eq!(c.out_of_service, 0);
        // Nothing moved: nothing counted again.
        assert_eq!(changes(&new, &new).rollout, None);
        assert!(changes(&new, &new).batches.is_empty());
    }

    #[test]
    fn remediation_steps_are_counted_once_each() {
        use crate::api::{MachineRemediation, RemediationAction};
        let rec = |pc, ri, healthy: bool| MachineRemediation {
            machine: "m1".into(),
            power_cycles: pc,
            reimages: ri,
            last_action: (pc + ri > 0).then_some(RemediationAction::PowerCycle),
            healthy_since: healthy.then(|| t(5)),
            ..Default::default()
        };
        let st = |r: Vec<MachineRemediation>| MachineSetStatus {
            remediations: r,
            ..Default::default()
        };
        let c = changes(&st(vec![rec(0, 0, false)]), &st(vec![rec(1, 1, false)]));
        assert_eq!(c.remediations, ["power_cycled", "reimaged"]);
        assert!(
            changes(&st(vec![rec(1, 1, false)]), &st(vec![rec(1, 1, false)]))
                .remediations
                .is_empty()
        );
        let c = changes(&st(vec![rec(1, 0, true)]), &st(vec![]));
        assert_eq!(c.remediations, ["recovered"]);
        let mut gave_up = rec(1, 1, false);
        gave_up.exhausted = true;
        let c = changes(&st(vec![rec(1, 1, false)]), &st(vec![gave_up]));
        assert_eq!(c.remediations, ["exhausted"]);
    }

    #[test]
    fn a_failed_batch_then_its_rollback() {
        let old = MachineSetStatus {
            rollout_state: Some(RolloutState::Progressing),
            current_batch: Some(batch(1, 2, false, 0)),
            replicas: 4,
            available_replicas: 2,
            ..Default::default()
        };
        let failed = MachineSetStatus {
            rollout_state: Some(RolloutState::Failed),
            current_batch: Some(batch(1, 1, true, 30)),
            last_failure: Some(RolloutFailure {
                revision: 2,
                batch: 1,
                at: t(30),
                ..Default::default()
            }),
            replicas: 4,
            available_replicas: 2,
            ..Default::default()
        };
        let c = changes(&old, &failed);
        assert_eq!(c.rollout, Some("failed"));
        assert_eq!(c.batches, [("update", "failed", 30.0)]);
        assert_eq!(c.out_of_service, 2);
        let mut back = failed.clone();
        back.rollout_state = Some(RolloutState::RolledBack);
        back.current_batch = None;
        back.conditions = vec![crate::api::Condition {
            type_: "Progressing".into(),
            status: crate::api::ConditionStatus::False,
            observed_generation: None,
            last_transition_time: t(50),
            reason: "RolledBack".into(),
            message: String::new(),
        }];
        let c = changes(&failed, &back);
        assert_eq!(c.rollout, Some("rolled_back"));
        assert_eq!(c.batches, [("rollback", "passed", 20.0)]);
    }
}
