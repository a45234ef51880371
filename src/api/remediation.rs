//! Remediation of unhealthy machines: the policy a MachineSet carries
//! (`spec.remediation`) and what the set records of each machine it
//! remediates (`status.remediations`). Schema and the pure rules that read
//! it (defaults, `maxUnhealthy`); the decisions are the set controller's
//! (`src/controller/machine_set/plan/remediate.rs`).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How long a machine must be unhealthy before the first action, unless
/// the policy says.
pub const DEFAULT_UNHEALTHY_SECONDS: i64 = 300;
/// How long an action has to bring a machine back before the next one,
/// unless the policy says.
pub const DEFAULT_RECOVERY_SECONDS: i64 = 600;

/// When a machine of a set counts as unhealthy, what is done about it, in
/// which order and how often, and when the set does nothing at all.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemediationPolicy {
    /// Signals that make a Ready machine unhealthy (default: both).
    /// `ProbeFailing` needs `updateStrategy.healthCheck.httpProbe`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy_when: Vec<UnhealthySignal>,
    /// How long a machine must stay unhealthy before the first action
    /// (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub unhealthy_seconds: Option<i64>,
    /// How long each action has to bring the machine back before the next
    /// one is taken (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub recovery_seconds: Option<i64>,
    /// Power cycles through the BMC, first (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub power_cycles: Option<i32>,
    /// Reimages with the machine's pinned revision, after the power cycles
    /// (default 1). Then the set gives up and says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub reimages: Option<i32>,
    /// With more unhealthy machines than this (a count, or a percentage of
    /// `replicas` rounded down), nothing is remediated: a network partition
    /// must not reimage a rack. Default `100%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unhealthy: Option<IntOrString>,
}

/// A signal that makes a Ready machine unhealthy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum UnhealthySignal {
    /// The Machine's `NodeReady` condition is `False` (a cluster that
    /// cannot be asked, `Unknown`, is not a signal).
    NodeNotReady,
    /// The set's health probe does not answer as expected.
    ProbeFailing,
}

/// A remediation step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RemediationAction {
    PowerCycle,
    Reimage,
}

impl RemediationAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RemediationAction::PowerCycle => "PowerCycle",
            RemediationAction::Reimage => "Reimage",
        }
    }
}

/// One machine the set found unhealthy, and what it did about it so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineRemediation {
    pub machine: String,
    /// Unhealthy without a break since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub unhealthy_since: Option<Timestamp>,
    /// Healthy again since (after an action): recovered once this has
    /// lasted `unhealthySeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub healthy_since: Option<Timestamp>,
    /// Why it is unhealthy.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default)]
    pub power_cycles: i32,
    #[serde(default)]
    pub reimages: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<RemediationAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub last_action_at: Option<Timestamp>,
    /// Every action was taken and it is still unhealthy: left alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exhausted: bool,
}

/// The policy with its defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub node_not_ready: bool,
    pub probe_failing: bool,
    pub unhealthy: std::time::Duration,
    pub recovery: std::time::Duration,
    pub power_cycles: i32,
    pub reimages: i32,
    /// Most unhealthy machines of `replicas` that are still remediated.
    pub max_unhealthy: u32,
}

fn secs(v: Option<i64>, default: i64) -> std::time::Duration {
    std::time::Duration::from_secs(u64::try_from(v.unwrap_or(default)).unwrap_or(0))
}

impl RemediationPolicy {
    /// Defaults filled in, `maxUnhealthy` resolved against `replicas` (an
    /// unreadable one, refused at validation, reads as 0: remediate none).
    pub fn resolve(&self, replicas: i32) -> Resolved {
        let all = self.unhealthy_when.is_empty();
        let has = |s| all || self.unhealthy_when.contains(&s);
        let max = match &self.max_unhealthy {
            None => MaxUnhealthy::Percent(100),
            Some(v) => parse_max_unhealthy(v).unwrap_or(MaxUnhealthy::Count(0)),
        };
        Resolved {
            node_not_ready: has(UnhealthySignal::NodeNotReady),
            probe_failing: has(UnhealthySignal::ProbeFailing),
            unhealthy: secs(self.unhealthy_seconds, DEFAULT_UNHEALTHY_SECONDS),
            recovery: secs(self.recovery_seconds, DEFAULT_RECOVERY_SECONDS),
            power_cycles: self.power_cycles.unwrap_or(1).max(0),
            reimages: self.reimages.unwrap_or(1).max(0),
            max_unhealthy: max.resolve(replicas),
        }
    }
}

/// `maxUnhealthy` read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxUnhealthy {
    Count(u32),
    Percent(u32),
}

impl MaxUnhealthy {
    /// The most unhealthy machines that are still remediated.
    pub fn resolve(self, replicas: i32) -> u32 {
        match self {
            MaxUnhealthy::Count(c) => c,
            MaxUnhealthy::Percent(p) => {
                let r = u64::try_from(replicas.max(0)).unwrap_or(0);
                u32::try_from(u64::from(p) * r / 100).unwrap_or(u32::MAX)
            }
        }
    }
}

/// Why a `maxUnhealthy` is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MaxUnhealthyError {
    #[error("must be 0 or more, got {0}")]
    Negative(i32),
    #[error("{0:?} is neither a count (1) nor a percentage (40%)")]
    NotACountOrPercentage(String),
}

/// Read `maxUnhealthy`: a count of 0 or more, or `"N%"` with N in 0..=100.
pub fn parse_max_unhealthy(v: &IntOrString) -> Result<MaxUnhealthy, MaxUnhealthyError> {
    match v {
        IntOrString::Int(n) if *n >= 0 => Ok(MaxUnhealthy::Count(n.unsigned_abs())),
        IntOrString::Int(n) => Err(MaxUnhealthyError::Negative(*n)),
        IntOrString::String(s) => {
            if let Some(p) = s.strip_suffix('%') {
                return p
                    .parse::<u32>()
                    .ok()
                    .filter(|p| *p <= 100)
                    .map(MaxUnhealthy::Percent)
                    .ok_or_else(|| MaxUnhealthyError::NotACountOrPercentage(s.clone()));
            }
            s.parse::<u32>()
                .map(MaxUnhealthy::Count)
                .map_err(|_| MaxUnhealthyError::NotACountOrPercentage(s.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_unhealthy_reads_counts_and_percentages() {
        let p = |v: IntOrString| parse_max_unhealthy(&v);
        assert_eq!(p(IntOrString::Int(0)), Ok(MaxUnhealthy::Count(0)));
        assert_eq!(
            p(IntOrString::String("40%".into())),
            Ok(MaxUnhealthy::Percent(40))
        );
        assert_eq!(
            p(IntOrString::String("3".into())),
            Ok(MaxUnhealthy::Count(3))
        );
        assert!(p(IntOrString::Int(-1)).is_err());
        assert!(p(IntOrString::String("101%".into())).is_err());
        assert!(p(IntOrString::String("many".into())).is_err());
        assert_eq!(MaxUnhealthy::Percent(40).resolve(5), 2);
        assert_eq!(MaxUnhealthy::Percent(100).resolve(4), 4);
    }

    #[test]
    fn defaults_fill_in_and_signals_default_to_both() {
        let r = RemediationPolicy::default().resolve(4);
        assert!(r.node_not_ready && r.probe_failing);
        assert_eq!((r.power_cycles, r.reimages, r.max_unhealthy), (1, 1, 4));
        assert_eq!(r.unhealthy.as_secs(), 300);
        let only = RemediationPolicy {
            unhealthy_when: vec![UnhealthySignal::ProbeFailing],
            ..Default::default()
        }
        .resolve(4);
        assert!(!only.node_not_ready && only.probe_failing);
    }
}
