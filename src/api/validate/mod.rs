//! Manifest validation with field paths. Every error names the field it is
//! about (`spec.bmc.address: unsupported scheme "ftp" ...`) so a user can fix
//! the manifest without reading code. Pure: no store access; references to
//! other objects (class, Secret) are checked by their consumers.
//!
//! One file per object kind (`machine.rs`, `machine_class.rs`,
//! `machine_set.rs`; Kubernetes' own kinds in `builtin.rs`); `common.rs` holds the checks they share (names,
//! versions, MACs, images and artifacts). This file owns the error types,
//! the decoding step and the dispatch by kind.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Kind;
use super::machine::Machine;
use super::machine_class::MachineClass;
use super::machine_set::MachineSet;

mod builtin;
mod common;
mod machine;
mod machine_class;
mod machine_set;

pub use builtin::decode_strict;
pub use common::{MalformedVersion, check_version, is_dns_label, is_dns_subdomain};
pub use machine::{BmcAddress, BmcAddressError, parse_bmc_address};
pub use machine_set::{MaxUnavailable, MaxUnavailableError, parse_max_unavailable};

/// One problem with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// All problems found in one manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|e| e.to_string()).collect();
        f.write_str(&parts.join("; "))
    }
}

impl ValidationErrors {
    pub(super) fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }
    pub(super) fn into_result(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
    pub fn single(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = ValidationErrors::default();
        e.push(field, message);
        e
    }
}

/// Decode a value into a typed object, reporting the path of the first field
/// serde rejects (unknown fields, wrong types).
pub fn decode<T: DeserializeOwned>(v: &Value) -> Result<T, ValidationErrors> {
    serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            "<root>".to_string()
        } else {
            path
        };
        let msg = e.into_inner().to_string();
        // serde's own message ends with " at line x column y" only for text
        // input; values have none. Trim the list of expected fields, which is
        // noisy for large structs.
        let msg = match msg.find(", expected one of") {
            Some(i) => msg[..i].to_string(),
            None => msg,
        };
        // A missing field is named by its own path, as kube-apiserver's
        // schema check names it (`spec.bmc.credentialsSecretRef: Required
        // value`), not by its parent's.
        match msg
            .strip_prefix("missing field `")
            .and_then(|r| r.split('`').next())
        {
            Some(name) if field == "<root>" => ValidationErrors::single(name, "required"),
            Some(name) => ValidationErrors::single(format!("{field}.{name}"), "required"),
            None => ValidationErrors::single(field, msg),
        }
    })
}

/// Validate a manifest of the given kind: shape (unknown fields, types),
/// then meaning (addresses, versions, references).
pub fn validate(kind: Kind, obj: &Value) -> Result<(), ValidationErrors> {
    validate_meta(obj)?;
    match kind {
        Kind::Machine => {
            let m: Machine = decode(obj)?;
            machine::validate_machine_spec(&m.spec)
        }
        Kind::MachineClass => {
            let c: MachineClass = decode(obj)?;
            machine_class::validate_class_spec(&c.spec)
        }
        Kind::MachineSet => {
            let s: MachineSet = decode(obj)?;
            machine_set::validate_set_spec(&s.spec)
        }
        Kind::Secret => validate_secret(obj),
        Kind::Lease => builtin::validate_lease(obj),
        Kind::Namespace => builtin::validate_namespace(obj),
        Kind::Event | Kind::DiscoveredMachine => Ok(()),
    }
}

fn validate_meta(obj: &Value) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name.is_empty() {
        errs.push("metadata.name", "required");
    } else if !is_dns_subdomain(name) {
        errs.push(
            "metadata.name",
            format!("{name:?} is not a valid name (lower-case letters, digits, '-' and '.', at most 253 characters)"),
        );
    }
    if let Some(ns) = obj
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        && !is_dns_label(ns)
    {
        errs.push(
            "metadata.namespace",
            format!("{ns:?} is not a valid namespace"),
        );
    }
    errs.into_result()
}

fn validate_secret(obj: &Value) -> Result<(), ValidationErrors> {
    let _: k8s_openapi::api::core::v1::Secret = decode(obj)?;
    Ok(())
}
