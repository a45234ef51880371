//! Conditions in the Kubernetes `metav1.Condition` shape.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// CamelCase type: `Ready`, `BmcReachable`, `PowerState`, `Provisioned`, `NodeReady`, `UpToDate`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[schemars(with = "String")]
    pub last_transition_time: Timestamp,
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

/// A condition's status, as `metav1.Condition` spells it. A stored word
/// other than these three (written by hand through `/status`) reads as
/// `Unknown`: nothing can be concluded from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// `True` or `False`.
    pub fn of(b: bool) -> ConditionStatus {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }

    /// The word on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// The status a word names (any other word: `Unknown`).
    pub fn parse(s: &str) -> ConditionStatus {
        match s {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        }
    }
}

impl<'de> Deserialize<'de> for ConditionStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(ConditionStatus::parse(&s))
    }
}

impl std::fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Set (or replace) a condition in a list, moving `lastTransitionTime` only
/// when the status actually changes, as Kubernetes' `meta.SetStatusCondition` does.
pub fn set_condition(conds: &mut Vec<Condition>, mut new: Condition) {
    if let Some(old) = conds.iter_mut().find(|c| c.type_ == new.type_) {
        if old.status == new.status {
            new.last_transition_time = old.last_transition_time;
        }
        *old = new;
    } else {
        conds.push(new);
    }
}

/// Find a condition by type.
pub fn find_condition<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(status: ConditionStatus, t: i64) -> Condition {
        Condition {
            type_: "Ready".into(),
            status,
            observed_generation: None,
            last_transition_time: Timestamp::from_second(t).unwrap(),
            reason: "R".into(),
            message: String::new(),
        }
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut v = vec![cond(ConditionStatus::True, 1)];
        set_condition(&mut v, cond(ConditionStatus::True, 2));
        assert_eq!(v[0].last_transition_time.as_second(), 1);
        set_condition(&mut v, cond(ConditionStatus::False, 3));
        assert_eq!(v[0].last_transition_time.as_second(), 3);
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn statuses_read_and_write_as_words() {
        for st in [
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ] {
            let j = serde_json::to_string(&st).unwrap();
            assert_eq!(j, format!("\"{st}\""));
            assert_eq!(serde_json::from_str::<ConditionStatus>(&j).unwrap(), st);
        }
        // A word written by hand reads as Unknown.
        let odd: ConditionStatus = serde_json::from_str("\"maybe\"").unwrap();
        assert_eq!(odd, ConditionStatus::Unknown);
        // A status written before the type existed still reads.
        let c: Condition = serde_json::from_str(
            r#"{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z",
                "reason": "NodeReady", "message": ""}"#,
        )
        .unwrap();
        assert_eq!(c.status, ConditionStatus::True);
    }
}
