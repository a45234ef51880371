//! Field selectors (`?fieldSelector=`), the subset kube-apiserver supports
//! on every kind plus Events' `involvedObject.*` (what `kubectl describe`
//! asks for): `metadata.name`, `metadata.namespace`, for Events
//! `involvedObject.{kind,namespace,name,uid,apiVersion}`, `reason` and
//! `type`, for Secrets `type`, for Namespaces `status.phase`, with `=`,
//! `==` and `!=`, comma-separated (all must hold).

use serde_json::Value;

use crate::api::Kind;

/// Why a field selector is refused (a 400 with this message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldSelectorError {
    #[error("invalid selector: {0:?}; expected field=value")]
    NotATerm(String),
    #[error("field label not supported: {field:?} (supported: metadata.name, metadata.namespace{})", also_supported(*kind))]
    Unsupported { kind: Kind, field: String },
}

/// The fields `kind` supports beyond the name and namespace, as a list
/// continuation (`, type`).
fn also_supported(kind: Kind) -> &'static str {
    match kind {
        Kind::Event => ", involvedObject.*, reason, type",
        Kind::Secret => ", type",
        Kind::Namespace => ", status.phase",
        _ => "",
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    pub fn parse(kind: Kind, s: &str) -> Result<FieldSelector, FieldSelectorError> {
        let mut terms = Vec::new();
        for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = t.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = t.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = t.split_once('=') {
                (f, true, v)
            } else {
                return Err(FieldSelectorError::NotATerm(t.to_string()));
            };
            let field = field.trim();
            if path(kind, field).is_none() {
                return Err(FieldSelectorError::Unsupported {
                    kind,
                    field: field.to_string(),
                });
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn matches(&self, kind: Kind, o: &Value) -> bool {
        self.terms.iter().all(|(field, equal, want)| {
            let have = path(kind, field)
                .and_then(|p| o.pointer(&p))
                .and_then(Value::as_str)
                .unwrap_or_default();
            (have == want) == *equal
        })
    }
}

/// The JSON pointer of a selectable field of `kind`.
fn path(kind: Kind, field: &str) -> Option<String> {
    match field {
        "metadata.name" | "metadata.namespace" => {}
        "involvedObject.kind"
        | "involvedObject.namespace"
        | "involvedObject.name"
        | "involvedObject.uid"
        | "involvedObject.apiVersion"
        | "reason"
        | "type"
            if kind == Kind::Event => {}
        "type" if kind == Kind::Secret => {}
        "status.phase" if kind == Kind::Namespace => {}
        _ => return None,
    }
    Some(format!("/{}", field.replace('.', "/")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn describe_selector_matches_the_events_of_one_object() {
        let ev = json!({"metadata": {"name": "e1", "namespace": "default"},
            "involvedObject": {"kind": "Machine", "name": "rack1-u07", "namespace": "default", "uid": "u1"}});
        let sel = FieldSelector::parse(
            Kind::Event,
            "involvedObject.name=rack1-u07,involvedObject.namespace=default,involvedObject.kind=Machine,involvedObject.uid=u1",
        )
        .unwrap();
        assert!(sel.matches(Kind::Event, &ev));
        let other = FieldSelector::parse(Kind::Event, "involvedObject.uid=u2").unwrap();
        assert!(!other.matches(Kind::Event, &ev));
        let not = FieldSelector::parse(Kind::Event, "metadata.name!=e1").unwrap();
        assert!(!not.matches(Kind::Event, &ev));
        assert!(FieldSelector::parse(Kind::Machine, "involvedObject.name=x").is_err());
        assert!(FieldSelector::parse(Kind::Machine, "metadata.name==x").is_ok());
        let opaque = FieldSelector::parse(Kind::Secret, "type=Opaque").unwrap();
        assert!(opaque.matches(Kind::Secret, &json!({"type": "Opaque"})));
        assert!(FieldSelector::parse(Kind::Namespace, "status.phase=Active").is_ok());
        assert!(FieldSelector::parse(Kind::Machine, "type=x").is_err());
        assert_eq!(
            FieldSelector::parse(Kind::Secret, "spec.x=1")
                .unwrap_err()
                .to_string(),
            r#"field label not supported: "spec.x" (supported: metadata.name, metadata.namespace, type)"#
        );
        assert_eq!(
            FieldSelector::parse(Kind::Event, "reason")
                .unwrap_err()
                .to_string(),
            r#"invalid selector: "reason"; expected field=value"#
        );
    }
}
