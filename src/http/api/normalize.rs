//! Canonical form of a manifest: decoded into its typed object and encoded
//! again, so defaults are filled in and two spellings of the same object
//! compare equal. The API stores objects in this form and `apply` compares
//! in it. Secrets get `stringData` folded into `data`, Namespaces their
//! name label and phase, as Kubernetes does.
//! Pure: no I/O.

use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, NamespaceStatus, Secret};
use serde_json::Value;

use crate::api::validate::decode;
use crate::api::{
    DiscoveredMachine, Event, Kind, Machine, MachineClass, MachineSet, ValidationErrors,
};
use crate::store::typed::{Object, to_value};

/// The label kube-apiserver sets on every Namespace, to its name.
pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Decode and re-encode `obj` as `kind`. Fails with field paths when the
/// object does not decode (run [`crate::api::validate::validate`] first for
/// the full set of checks).
pub fn normalize(kind: Kind, obj: &Value) -> Result<Value, ValidationErrors> {
    match kind {
        Kind::Machine => typed::<Machine>(obj),
        Kind::MachineClass => typed::<MachineClass>(obj),
        Kind::MachineSet => typed::<MachineSet>(obj),
        Kind::DiscoveredMachine => typed::<DiscoveredMachine>(obj),
        Kind::Event => typed::<Event>(obj),
        Kind::Lease => typed::<Lease>(obj),
        Kind::Namespace => {
            let mut ns: Namespace = decode(obj)?;
            let name = ns.metadata.name.clone().unwrap_or_default();
            // What kube-apiserver keeps on every Namespace: the name label
            // (selectable), and the phase (metalherd deletes a namespace at
            // once, so it is never `Terminating`).
            ns.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(NAME_LABEL.into(), name);
            ns.status = Some(NamespaceStatus {
                phase: Some("Active".into()),
                ..Default::default()
            });
            encode(&ns)
        }
        Kind::Secret => {
            let mut s: Secret = decode(obj)?;
            if let Some(sd) = s.string_data.take() {
                let data = s.data.get_or_insert_with(Default::default);
                for (k, v) in sd {
                    data.insert(k, ByteString(v.into_bytes()));
                }
            }
            encode(&s)
        }
    }
}

fn typed<T: Object>(obj: &Value) -> Result<Value, ValidationErrors> {
    let t: T = decode(obj)?;
    encode(&t)
}

fn encode<T: Object>(t: &T) -> Result<Value, ValidationErrors> {
    to_value(t).map_err(|e| ValidationErrors::single("<root>", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_string_data_becomes_data() {
        let s = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "bmc"}, "stringData": {"username": "admin"}});
        let n = normalize(Kind::Secret, &s).unwrap();
        assert_eq!(n["data"]["username"], "YWRtaW4=");
        assert!(n.get("stringData").is_none());
    }

    #[test]
    fn namespaces_get_their_name_label_and_phase() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "lab", "labels": {"team": "a"}}});
        let n = normalize(Kind::Namespace, &ns).unwrap();
        assert_eq!(
            n["metadata"]["labels"],
            json!({"team": "a", "kubernetes.io/metadata.name": "lab"})
        );
        assert_eq!(n["status"]["phase"], "Active");
    }

    #[test]
    fn machine_defaults_filled() {
        let m = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m"},
            "spec": {"bmc": {"address": "ipmi://h", "credentialsSecretRef": {"name": "s"}}}});
        let n = normalize(Kind::Machine, &m).unwrap();
        assert_eq!(n["spec"]["online"], false);
        assert_eq!(n["kind"], "Machine");
    }
}
