//! MachineSet validation: replicas, the machine template and the update
//! strategy.

use super::ValidationErrors;
use super::common::validate_overrides;
use crate::api::machine_set::MachineSetSpec;

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
    if let Some(us) = &spec.update_strategy {
        if let Some(t) = &us.type_
            && !matches!(t.as_str(), "InPlace" | "Replace")
        {
            errs.push(
                "spec.updateStrategy.type",
                format!("unknown strategy {t:?} (use InPlace or Replace)"),
            );
        }
        if let Some(m) = us.max_unavailable
            && m < 1
        {
            errs.push("spec.updateStrategy.maxUnavailable", "must be 1 or more");
        }
        if let Some(d) = us.progress_deadline_seconds
            && d < 1
        {
            errs.push(
                "spec.updateStrategy.progressDeadlineSeconds",
                "must be 1 or more",
            );
        }
    }
    errs.into_result()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::api::Kind;
    use crate::api::validate::validate;

    fn first(kind: Kind, v: &Value) -> String {
        validate(kind, v).unwrap_err().0[0].to_string()
    }

    #[test]
    fn negative_replicas() {
        let v = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": "w"},
            "spec": {"replicas": -1, "selector": {}, "template": {"classRef": {"name": "c"}}}});
        assert_eq!(
            first(Kind::MachineSet, &v),
            "spec.replicas: must be 0 or more, got -1"
        );
    }
}
