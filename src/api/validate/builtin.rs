//! Kubernetes' own kinds served here (coordination.k8s.io Leases, core/v1
//! Namespaces): decoded
//! into k8s-openapi's types, with unknown fields refused by path (those
//! types ignore them when decoding, kube-apiserver's strict decoding does
//! not), then kube-apiserver's own checks of the kind.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{ValidationErrors, decode};

/// Decode `obj` as `T`, refusing any field `T` does not have (by its path,
/// as `fieldValidation=Strict` does): a field is unknown when it is set in
/// `obj` and gone once the decoded value is encoded again.
pub fn decode_strict<T: DeserializeOwned + Serialize>(obj: &Value) -> Result<T, ValidationErrors> {
    let t: T = decode(obj)?;
    let back =
        serde_json::to_value(&t).map_err(|e| ValidationErrors::single("<root>", e.to_string()))?;
    let mut errs = ValidationErrors::default();
    unknown(obj, &back, "", &mut errs);
    errs.into_result()?;
    Ok(t)
}

fn unknown(given: &Value, kept: &Value, at: &str, errs: &mut ValidationErrors) {
    let join = |k: &str| {
        if at.is_empty() {
            k.to_string()
        } else {
            format!("{at}.{k}")
        }
    };
    match (given, kept) {
        (Value::Object(g), Value::Object(k)) => {
            for (key, v) in g {
                match k.get(key) {
                    None if !v.is_null() => errs.push(join(key), "unknown field"),
                    None => {}
                    Some(kv) => unknown(v, kv, &join(key), errs),
                }
            }
        }
        (Value::Array(g), Value::Array(k)) => {
            for (i, (gv, kv)) in g.iter().zip(k).enumerate() {
                unknown(gv, kv, &format!("{at}[{i}]"), errs);
            }
        }
        _ => {}
    }
}

/// A `coordination.k8s.io/v1` Lease, checked as kube-apiserver's
/// `ValidateLeaseSpec` does.
pub fn validate_lease(obj: &Value) -> Result<(), ValidationErrors> {
    use k8s_openapi::api::coordination::v1::Lease;
    let lease: Lease = decode_strict(obj)?;
    let mut errs = ValidationErrors::default();
    let spec = lease.spec.unwrap_or_default();
    if let Some(d) = spec.lease_duration_seconds
        && d <= 0
    {
        errs.push(
            "spec.leaseDurationSeconds",
            format!("Invalid value: {d}: must be greater than 0"),
        );
    }
    if let Some(t) = spec.lease_transitions
        && t < 0
    {
        errs.push(
            "spec.leaseTransitions",
            format!("Invalid value: {t}: must be greater than or equal to 0"),
        );
    }
    let strategy = spec.strategy.as_deref().unwrap_or_default();
    if !strategy.is_empty() && strategy != "OldestEmulationVersion" {
        errs.push(
            "spec.strategy",
            format!(
                "Unsupported value: {strategy:?}: supported values: \"OldestEmulationVersion\""
            ),
        );
    }
    if spec
        .preferred_holder
        .as_deref()
        .is_some_and(|h| !h.is_empty())
        && strategy.is_empty()
    {
        errs.push(
            "spec.preferredHolder",
            "Forbidden: may only be specified if `strategy` is defined",
        );
    }
    errs.into_result()
}

/// A core/v1 Namespace: its name is a DNS label (it becomes part of
/// other objects' names and URLs).
pub fn validate_namespace(obj: &Value) -> Result<(), ValidationErrors> {
    use k8s_openapi::api::core::v1::Namespace;
    let ns: Namespace = decode_strict(obj)?;
    let name = ns.metadata.name.unwrap_or_default();
    if !super::is_dns_label(&name) {
        return Err(ValidationErrors::single(
            "metadata.name",
            format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (at most 63 characters)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn lease(spec: Value) -> Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "metalherd", "namespace": "default", "creationTimestamp": null},
               "spec": spec})
    }

    #[test]
    fn a_lease_as_leader_election_writes_it_is_valid() {
        let l = lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 15,
            "acquireTime": "2026-11-22T03:00:00.000000Z", "renewTime": "2026-11-22T03:00:05.123456Z",
            "leaseTransitions": 0}));
        validate_lease(&l).unwrap();
    }

    #[test]
    fn unknown_fields_are_refused_by_path() {
        let e = validate_lease(&lease(json!({"holderIdentity": "a", "holder": "b"}))).unwrap_err();
        assert_eq!(e.0[0].field, "spec.holder");
        assert_eq!(e.0[0].message, "unknown field");
        let mut l = lease(json!({}));
        l["metadata"]["bogus"] = json!(1);
        let e = validate_lease(&l).unwrap_err();
        assert_eq!(e.0[0].field, "metadata.bogus");
    }

    #[test]
    fn kube_apiservers_lease_rules() {
        let e = validate_lease(&lease(
            json!({"leaseDurationSeconds": 0, "leaseTransitions": -1}),
        ))
        .unwrap_err();
        let fields: Vec<&str> = e.0.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.leaseDurationSeconds", "spec.leaseTransitions"]
        );
        let e = validate_lease(&lease(json!({"preferredHolder": "b"}))).unwrap_err();
        assert_eq!(e.0[0].field, "spec.preferredHolder");
        let e = validate_lease(&lease(json!({"holderIdentity": 5}))).unwrap_err();
        assert_eq!(e.0[0].field, "spec.holderIdentity");
    }

    #[test]
    fn namespace_names_are_dns_labels() {
        let ns = |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        validate_namespace(&ns("lab-2")).unwrap();
        let e = validate_namespace(&ns("lab.two")).unwrap_err();
        assert_eq!(e.0[0].field, "metadata.name");
        let mut bad = ns("lab");
        bad["spec"] = json!({"finalizers": ["kubernetes"], "color": "red"});
        assert_eq!(
            validate_namespace(&bad).unwrap_err().0[0].field,
            "spec.color"
        );
    }
}
