//! Canonical form of a manifest: decoded into its typed object and encoded
//! again, so defaults are filled in and two spellings of the same object
//! compare equal. The API stores objects in this form and `apply` compares
//! in it. Secrets get `stringData` folded into `data`, as Kubernetes does.
//! Pure: no I/O.

use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;

use crate::api::validate::decode;
use crate::api::{
    DiscoveredMachine, Event, Kind, Machine, MachineClass, MachineSet, ValidationErrors,
};
use crate::store::typed::{Object, to_value};

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
    fn machine_defaults_filled() {
        let m = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": "m"},
            "spec": {"bmc": {"address": "ipmi://h", "credentialsSecretRef": {"name": "s"}}}});
        let n = normalize(Kind::Machine, &m).unwrap();
        assert_eq!(n["spec"]["online"], false);
        assert_eq!(n["kind"], "Machine");
    }
}
