//! Where a [`Kind`] lives on a Kubernetes API server (URL paths built from
//! `Kind`'s own apiVersion and plural, as `kube::Resource::url_path` does),
//! and how the server's answers become [`StoreError`]s. Pure: no requests
//! here.

use serde_json::{Value, json};

use crate::api::{FieldError, Kind, ValidationErrors};
use crate::store::StoreError;

/// The collection path of `kind`: in `namespace`, or across all
/// namespaces when `None` (and always for a kind that is not
/// [`Kind::namespaced`]). Group and version come from
/// [`Kind::api_version`]: `v1` is the core group under `/api`, anything
/// else (`group/version`) is under `/apis`.
pub fn collection_path(kind: Kind, namespace: Option<&str>) -> String {
    let namespace = namespace.filter(|_| kind.namespaced());
    let api_version = kind.api_version();
    let prefix = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    match namespace {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{}", kind.plural()),
        None => format!("{prefix}/{}", kind.plural()),
    }
}

/// What a request was doing, for error messages: the Kubernetes verb and
/// the resource it touched.
#[derive(Clone, Debug)]
pub struct Call<'a> {
    pub verb: &'static str,
    pub kind: Kind,
    /// `None` for a list or watch across all namespaces.
    pub namespace: Option<&'a str>,
    /// Empty for lists and watches.
    pub name: &'a str,
    /// `status` for the status subresource.
    pub subresource: Option<&'static str>,
    /// The resourceVersion the request was made from (watch) or with
    /// (update), for `Conflict` and `Gone`.
    pub resource_version: Option<&'a str>,
}

impl Call<'_> {
    /// `machines/status "m1" in namespace "default"`, as RBAC names it.
    fn resource(&self) -> String {
        let mut r = self.kind.plural().to_string();
        if let Some(s) = self.subresource {
            r.push('/');
            r.push_str(s);
        }
        if !self.name.is_empty() {
            r.push_str(&format!(" {:?}", self.name));
        }
        match self.namespace {
            Some(ns) => r.push_str(&format!(" in namespace {ns:?}")),
            None => r.push_str(" in all namespaces"),
        }
        r
    }

    /// Map a kube-rs error of this call to a store error.
    pub fn error(&self, e: kube::Error) -> StoreError {
        match e {
            kube::Error::Api(s) => self.status_error(&s),
            kube::Error::SerdeError(e) => {
                StoreError::Malformed(format!("{} {}: {e}", self.verb, self.resource()))
            }
            other => StoreError::Backend(format!("{} {}: {other}", self.verb, self.resource())),
        }
    }

    /// Map a failure `Status` (an HTTP error, or a watch `ERROR` event).
    pub fn status_error(&self, s: &kube::core::Status) -> StoreError {
        let namespace = self.namespace.unwrap_or_default().to_string();
        let name = self.name.to_string();
        let kind = self.kind;
        match (s.code, s.reason.as_str()) {
            (404, _) => StoreError::NotFound {
                kind,
                namespace,
                name,
            },
            (409, "AlreadyExists") => StoreError::AlreadyExists {
                kind,
                namespace,
                name,
            },
            (409, _) => StoreError::Conflict {
                kind,
                namespace,
                name,
                expected: self.resource_version.unwrap_or_default().to_string(),
                current: "newer".into(),
            },
            (410, _) => StoreError::Gone {
                requested: self.resource_version.unwrap_or_default().to_string(),
                oldest: "unknown (the API server compacted it)".into(),
            },
            // A refused watch request can only be about its version (the
            // selector was parsed here before): the stand-in answers 400;
            // kube-apiserver answers 500 `resourceVersion: Invalid value`
            // for one it cannot parse.
            (400 | 422, _) if self.verb == "watch" => StoreError::BadResourceVersion(
                self.resource_version.unwrap_or_default().to_string(),
            ),
            (500, _)
                if self.verb == "watch" && s.message.contains("resourceVersion: Invalid value") =>
            {
                StoreError::BadResourceVersion(
                    self.resource_version.unwrap_or_default().to_string(),
                )
            }
            (422, _) => StoreError::Invalid(invalid(s)),
            (403, _) => StoreError::Forbidden {
                verb: self.verb,
                resource: self.resource(),
                message: s.message.clone(),
            },
            (401, _) => StoreError::Backend(format!(
                "the API server refused our credentials ({} {}): {}",
                self.verb,
                self.resource(),
                s.message
            )),
            (code, reason) => StoreError::Backend(format!(
                "{} {}: {code} {reason}: {}",
                self.verb,
                self.resource(),
                s.message
            )),
        }
    }
}

/// The field causes of a 422 `Invalid` Status as validation errors, so the
/// same field paths show as in standalone mode; the whole message when the
/// server names no field.
fn invalid(s: &kube::core::Status) -> ValidationErrors {
    let causes: Vec<FieldError> = s
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .filter(|c| !c.field.is_empty())
        .map(|c| FieldError {
            field: c.field.clone(),
            message: c.message.clone(),
        })
        .collect();
    if causes.is_empty() {
        ValidationErrors::single("", s.message.clone())
    } else {
        ValidationErrors(causes)
    }
}

/// What a DELETE answered when the object went at once as a `Status`
/// (kube-apiserver does so for kinds whose storage does not return the
/// deleted object, Secrets among them): the object as far as the Status
/// names it.
pub fn deleted_stub(kind: Kind, namespace: &str, name: &str, s: &kube::core::Status) -> Value {
    let uid = s
        .details
        .as_ref()
        .map(|d| d.uid.clone())
        .unwrap_or_default();
    json!({
        "apiVersion": kind.api_version(),
        "kind": kind.as_str(),
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn call(verb: &'static str) -> Call<'static> {
        Call {
            verb,
            kind: Kind::Machine,
            namespace: Some("default"),
            name: "m1",
            subresource: None,
            resource_version: Some("41"),
        }
    }

    fn status(body: Value) -> Status {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn paths_come_from_the_kind() {
        assert_eq!(
            collection_path(Kind::Machine, Some("lab")),
            "/apis/metalherd.dev/v1alpha1/namespaces/lab/machines"
        );
        assert_eq!(
            collection_path(Kind::Secret, Some("default")),
            "/api/v1/namespaces/default/secrets"
        );
        assert_eq!(collection_path(Kind::Event, None), "/api/v1/events");
    }

    #[test]
    fn invalid_keeps_the_field_paths() {
        let s = status(
            json!({"code": 422, "reason": "Invalid", "message": "Machine \"m1\" is invalid",
            "details": {"causes": [
                {"reason": "FieldValueInvalid", "field": "spec.bootMACAddress", "message": "malformed MAC"},
                {"reason": "FieldValueRequired", "field": "spec.bmc.address", "message": "required"}]}}),
        );
        let e = call("create").status_error(&s);
        assert_eq!(
            e.to_string(),
            "spec.bootMACAddress: malformed MAC; spec.bmc.address: required"
        );
    }

    #[test]
    fn forbidden_names_verb_and_resource() {
        let s = status(json!({"code": 403, "reason": "Forbidden",
            "message": "machines.metalherd.dev \"m1\" is forbidden: User \"system:serviceaccount:metalherd:metalherd\" cannot update resource \"machines/status\""}));
        let mut c = call("update");
        c.subresource = Some("status");
        let e = c.status_error(&s);
        assert!(matches!(e, StoreError::Forbidden { verb: "update", .. }));
        let text = e.to_string();
        assert!(
            text.contains("update machines/status \"m1\" in namespace \"default\""),
            "{text}"
        );
    }

    #[test]
    fn codes_map_to_store_errors() {
        let s =
            |code, reason: &str| status(json!({"code": code, "reason": reason, "message": "x"}));
        assert!(call("get").status_error(&s(404, "NotFound")).is_not_found());
        assert!(matches!(
            call("create").status_error(&s(409, "AlreadyExists")),
            StoreError::AlreadyExists { .. }
        ));
        assert!(
            call("update")
                .status_error(&s(409, "Conflict"))
                .is_conflict()
        );
        assert!(matches!(
            call("watch").status_error(&s(410, "Expired")),
            StoreError::Gone { .. }
        ));
        for (code, reason) in [(400, "BadRequest"), (422, "Invalid")] {
            assert!(matches!(
                call("watch").status_error(&s(code, reason)),
                StoreError::BadResourceVersion(_)
            ));
        }
        assert!(matches!(
            call("get").status_error(&s(500, "InternalError")),
            StoreError::Backend(_)
        ));
        // What kube-apiserver v1.34 answers a watch from a version it
        // cannot parse (tests/store_kubernetes.rs meets it for real).
        let unparsable = status(json!({"code": 500, "reason": "InternalError",
            "message": "resourceVersion: Invalid value: \"x\": strconv.ParseUint: parsing \"x\": invalid syntax"}));
        assert!(matches!(
            call("watch").status_error(&unparsable),
            StoreError::BadResourceVersion(_)
        ));
        assert!(matches!(
            call("list").status_error(&unparsable),
            StoreError::Backend(_)
        ));
    }
}
