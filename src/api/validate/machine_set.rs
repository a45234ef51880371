//! MachineSet validation: replicas, the machine template and the update
//! strategy (with `maxUnavailable` read as a count or a percentage). Pure.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::ValidationErrors;
use super::common::{validate_overrides, validate_remediation};
use crate::api::machine_set::{MachineSetSpec, StrategyType};

/// Check a MachineSet spec; every problem names its field.
pub(super) fn validate_set_spec(spec: &MachineSetSpec) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    if spec.replicas < 0 {
        errs.push(
            "spec.replicas",
            format!("must be 0 or more, got {}", spec.replicas),
        );
    }
    if spec.template.class_ref.name.is_empty() {
        errs.push("spec.template.classRef.name", "required");
    }
    if let Some(o) = &spec.template.overrides {
        validate_overrides(o, "spec.template.overrides", &mut errs);
    }
    if let Some(n) = spec.revision_history_limit
        && n < 1
    {
        errs.push("spec.revisionHistoryLimit", "must be 1 or more");
    }
    if let Some(sel) = &spec.selector.match_labels
        && sel.contains_key(crate::api::machine_set::SET_LABEL)
    {
        errs.push(
            "spec.selector.matchLabels",
            format!(
                "{} is set by metalherd when a set claims a machine; select the pool by other labels",
                crate::api::machine_set::SET_LABEL
            ),
        );
    }
    if let Some(r) = &spec.remediation {
        validate_remediation(r, "spec.remediation", &mut errs);
    }
    let Some(us) = &spec.update_strategy else {
        return errs.into_result();
    };
    if us.type_ == Some(StrategyType::Replace) {
        errs.push(
            "spec.updateStrategy.type",
            "Replace is not implemented yet; use InPlace (reimage each machine in place)",
        );
    }
    if let Some(m) = &us.max_unavailable
        && let Err(e) = parse_max_unavailable(m)
    {
        errs.push("spec.updateStrategy.maxUnavailable", e.to_string());
    }
    if let Some(d) = us.progress_deadline_seconds
        && d < 1
    {
        errs.push(
            "spec.updateStrategy.progressDeadlineSeconds",
            "must be 1 or more",
        );
    }
    if let Some(hc) = &us.health_check {
        if let Some(s) = hc.node_ready_seconds
            && s < 0
        {
            errs.push(
                "spec.updateStrategy.healthCheck.nodeReadySeconds",
                "must be 0 or more",
            );
        }
        if let Some(p) = &hc.http_probe {
            let url = p.url.replace("{{address}}", "127.0.0.1");
            match url::Url::parse(&url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                Ok(u) => errs.push(
                    "spec.updateStrategy.healthCheck.httpProbe.url",
                    format!("unsupported scheme {:?} (use http or https)", u.scheme()),
                ),
                Err(e) => errs.push(
                    "spec.updateStrategy.healthCheck.httpProbe.url",
                    format!("not a URL: {e}"),
                ),
            }
            if let Some(s) = p.expected_status
                && !(100..=599).contains(&s)
            {
                errs.push(
                    "spec.updateStrategy.healthCheck.httpProbe.expectedStatus",
                    format!("{s} is not an HTTP status"),
                );
            }
        }
    }
    errs.into_result()
}

/// How `maxUnavailable` is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxUnavailable {
    Count(u32),
    Percent(u32),
}

impl MaxUnavailable {
    /// Machines that may be out at once for `replicas`: at least 1.
    pub fn resolve(self, replicas: i32) -> u32 {
        let n = match self {
            MaxUnavailable::Count(c) => c,
            MaxUnavailable::Percent(p) => {
                (u64::from(p) * u64::try_from(replicas.max(0)).unwrap_or(0) / 100) as u32
            }
        };
        n.max(1)
    }
}

/// Why a `maxUnavailable` is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MaxUnavailableError {
    #[error("must be 1 or more, got {0}")]
    TooSmall(i32),
    #[error("{0:?} is neither a count (2) nor a percentage (25%)")]
    NotACountOrPercentage(String),
}

/// Read `maxUnavailable`: a count of 1 or more, or `"N%"` with N in 1..=100.
pub fn parse_max_unavailable(v: &IntOrString) -> Result<MaxUnavailable, MaxUnavailableError> {
    match v {
        IntOrString::Int(n) if *n >= 1 => Ok(MaxUnavailable::Count(n.unsigned_abs())),
        IntOrString::Int(n) => Err(MaxUnavailableError::TooSmall(*n)),
        IntOrString::String(s) => {
            let pct = s
                .strip_suffix('%')
                .and_then(|p| p.parse::<u32>().ok())
                .filter(|p| (1..=100).contains(p));
            match pct {
                Some(p) => Ok(MaxUnavailable::Percent(p)),
                None => s
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .map(MaxUnavailable::Count)
                    .ok_or_else(|| MaxUnavailableError::NotACountOrPercentage(s.clone())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Kind;
    use serde_json::json;

    fn set(strategy: serde_json::Value) -> serde_json::Value {
        json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": "w"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"role": "worker"}},
                "template": {"classRef": {"name": "c"}}, "updateStrategy": strategy}})
    }

    fn errors(v: &serde_json::Value) -> Vec<String> {
        match crate::api::validate::validate(Kind::MachineSet, v) {
            Ok(()) => vec![],
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn negative_replicas() {
        let v = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": "w"},
            "spec": {"replicas": -1, "selector": {}, "template": {"classRef": {"name": "c"}}}});
        assert_eq!(errors(&v), vec!["spec.replicas: must be 0 or more, got -1"]);
    }

    #[test]
    fn remediation_fields_are_checked_by_name() {
        let mut v = set(json!({}));
        v["spec"]["remediation"] = json!({"unhealthySeconds": -1, "recoverySeconds": 0,
            "powerCycles": -2, "maxUnhealthy": "half"});
        assert_eq!(
            errors(&v),
            vec![
                "spec.remediation.unhealthySeconds: must be 0 or more, got -1",
                "spec.remediation.recoverySeconds: must be 1 or more, got 0",
                "spec.remediation.powerCycles: must be 0 or more, got -2",
                "spec.remediation.maxUnhealthy: \"half\" is neither a count (1) nor a percentage (40%)",
            ]
        );
        v["spec"]["remediation"] =
            json!({"maxUnhealthy": "40%", "unhealthyWhen": ["ProbeFailing"]});
        assert!(errors(&v).is_empty());
    }

    #[test]
    fn replace_is_refused_with_a_message() {
        let e = errors(&set(json!({"type": "Replace"})));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("spec.updateStrategy.type: Replace is not implemented yet"));
        assert!(errors(&set(json!({"type": "InPlace"}))).is_empty());
    }

    #[test]
    fn max_unavailable_count_or_percentage() {
        assert!(errors(&set(json!({"maxUnavailable": 2}))).is_empty());
        assert!(errors(&set(json!({"maxUnavailable": "25%"}))).is_empty());
        let e = errors(&set(json!({"maxUnavailable": "lots"})));
        assert_eq!(
            e,
            vec![
                "spec.updateStrategy.maxUnavailable: \"lots\" is neither a count (2) nor a percentage (25%)"
            ]
        );
        let e = errors(&set(json!({"maxUnavailable": 0})));
        assert_eq!(
            e,
            vec!["spec.updateStrategy.maxUnavailable: must be 1 or more, got 0"]
        );
        assert_eq!(MaxUnavailable::Percent(25).resolve(10), 2);
        assert_eq!(MaxUnavailable::Percent(10).resolve(4), 1);
        assert_eq!(MaxUnavailable::Count(2).resolve(4), 2);
    }

    #[test]
    fn probe_url_and_status() {
        let e = errors(&set(json!({"healthCheck": {"httpProbe":
            {"url": "ftp://{{address}}/h", "expectedStatus": 99}}})));
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("spec.updateStrategy.healthCheck.httpProbe.url"));
    }
}
