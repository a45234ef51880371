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
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[schemars(with = "String")]
    pub last_transition_time: Timestamp,
    pub reason: String,
    #[serde(default)]
    pub message: String,
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

    fn cond(status: &str, t: i64) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: status.into(),
            observed_generation: None,
            last_transition_time: Timestamp::from_second(t).unwrap(),
            reason: "R".into(),
            message: String::new(),
        }
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut v = vec![cond("True", 1)];
        set_condition(&mut v, cond("True", 2));
        assert_eq!(v[0].last_transition_time.as_second(), 1);
        set_condition(&mut v, cond("False", 3));
        assert_eq!(v[0].last_transition_time.as_second(), 3);
        assert_eq!(v.len(), 1);
    }
}
