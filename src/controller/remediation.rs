//! One machine's remediation record through time, shared by the MachineSet
//! planner (a set's machines, `status.remediations`) and the Machine
//! controller (a standalone Machine's own policy, `status.remediation`).
//! Pure: a record, what was seen and `now` in; the record and the next
//! action out.

use std::time::Duration;

use jiff::Timestamp;

use crate::api::MachineRemediation;
use crate::api::RemediationAction;
use crate::api::remediation::Resolved;

/// What was seen of the machine this time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Ready, and unhealthy for this reason.
    Unhealthy(String),
    /// Ready and healthy.
    Healthy,
    /// Not Ready (being reimaged, say): not judged.
    NotReady,
}

/// What became of the record.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The record to keep (`None`: none, or dropped).
    pub record: Option<MachineRemediation>,
    /// It recovered after this action (its record is dropped).
    pub recovered: Option<RemediationAction>,
}

/// The next action for a record, when one is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Wait,
    /// The `n`th of `of` actions of its kind.
    Act {
        action: RemediationAction,
        n: i32,
        of: i32,
    },
    /// Every action was taken: give up (the record says so from now on).
    GiveUp,
}

pub fn since(a: Timestamp, b: Timestamp) -> Duration {
    Duration::try_from(b.duration_since(a)).unwrap_or(Duration::ZERO)
}

/// Fold what was seen into `rec` (of `machine`).
pub fn observe(
    rec: Option<MachineRemediation>,
    machine: &str,
    seen: Seen,
    r: &Resolved,
    now: Timestamp,
) -> Observed {
    let keep = |record| Observed {
        record,
        recovered: None,
    };
    match (seen, rec) {
        (Seen::Unhealthy(why), Some(mut rec)) => {
            rec.healthy_since = None;
            rec.unhealthy_since.get_or_insert(now);
            rec.reason = why;
            keep(Some(rec))
        }
        (Seen::Unhealthy(why), None) => keep(Some(MachineRemediation {
            machine: machine.to_string(),
            unhealthy_since: Some(now),
            reason: why,
            ..Default::default()
        })),
        // Healthy before any action: a blip, forgotten.
        (_, Some(rec)) if rec.last_action.is_none() => keep(None),
        // Being reimaged: once Ready again it is judged afresh.
        (Seen::NotReady, Some(mut rec)) => {
            rec.unhealthy_since = None;
            keep(Some(rec))
        }
        (Seen::Healthy, Some(mut rec)) => {
            let at = *rec.healthy_since.get_or_insert(now);
            if since(at, now) >= r.unhealthy {
                Observed {
                    record: None,
                    recovered: rec.last_action,
                }
            } else {
                keep(Some(rec))
            }
        }
        (_, None) => keep(None),
    }
}

/// Whether an action is due on `rec` now, and which; a due action (or
/// giving up) is recorded in `rec`. The caller has checked that the
/// machine may be acted on (Ready, not paused, in no batch).
pub fn next(rec: &mut MachineRemediation, r: &Resolved, now: Timestamp) -> Next {
    let Some(unhealthy_since) = rec.unhealthy_since else {
        return Next::Wait;
    };
    if rec.exhausted
        || rec.healthy_since.is_some()
        || since(unhealthy_since, now) < r.unhealthy
        || rec
            .last_action_at
            .is_some_and(|at| since(at, now) < r.recovery)
    {
        return Next::Wait;
    }
    let (action, n, of) = if rec.power_cycles < r.power_cycles {
        rec.power_cycles += 1;
        (
            RemediationAction::PowerCycle,
            rec.power_cycles,
            r.power_cycles,
        )
    } else if rec.reimages < r.reimages {
        rec.reimages += 1;
        (RemediationAction::Reimage, rec.reimages, r.reimages)
    } else {
        rec.exhausted = true;
        return Next::GiveUp;
    };
    rec.last_action = Some(action);
    rec.last_action_at = Some(now);
    Next::Act { action, n, of }
}

/// The request an action carries (an annotation's value, a history step's
/// detail): who asks, which attempt, when and why. Unique per action.
pub fn request(
    who: &str,
    action: RemediationAction,
    n: i32,
    of: i32,
    now: Timestamp,
    reason: &str,
) -> String {
    format!("{who}: {} {n} of {of} at {now}: {reason}", action.as_str())
}

/// Whether an action is still at work on the record's machine.
pub fn acting(rec: &MachineRemediation, recovery: Duration, now: Timestamp) -> bool {
    !rec.exhausted
        && rec.healthy_since.is_none()
        && rec
            .last_action_at
            .is_some_and(|at| since(at, now) < recovery)
}

/// Why the set (or the Machine) gave up.
pub fn exhausted_message(rec: &MachineRemediation) -> String {
    format!(
        "{} still unhealthy ({}) after {} power cycles and {} reimages: left alone",
        rec.machine, rec.reason, rec.power_cycles, rec.reimages
    )
}
