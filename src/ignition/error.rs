//! Why a config could not be rendered. Every variant names the field (a
//! manifest path like `spec.containerRuntime.name`) a user has to fix.
//! Messages never carry secret values: not the join token, not the per-boot
//! token, not the contents of a Secret.

/// A config was refused; nothing half-rendered is ever returned with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// A field holds a value metalherd cannot render (or that would inject
    /// text into a unit, script or YAML file).
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("{field}: unknown container runtime {name:?} (supported: containerd)")]
    UnknownRuntime { field: String, name: String },
    #[error("{field}: malformed version {version:?} (expected dotted numbers like \"v1.33.4\")")]
    MalformedVersion { field: String, version: String },
    #[error("{field}: Secret {name:?} not found")]
    MissingSecret { field: String, name: String },
    #[error("{field}: Secret {name:?} has no key {key:?}")]
    MissingSecretKey {
        field: String,
        name: String,
        key: String,
    },
    #[error("{field}: Ignition fragment does not parse: {reason}")]
    Fragment { field: String, reason: String },
    /// A template failed to render (a bug, not bad input).
    #[error("template {template}: {source}")]
    Template {
        template: &'static str,
        #[source]
        source: askama::Error,
    },
}

impl RenderError {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        RenderError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The manifest field the error is about, if it is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            RenderError::Invalid { field, .. }
            | RenderError::UnknownRuntime { field, .. }
            | RenderError::MalformedVersion { field, .. }
            | RenderError::MissingSecret { field, .. }
            | RenderError::MissingSecretKey { field, .. }
            | RenderError::Fragment { field, .. } => Some(field),
            RenderError::Template { .. } => None,
        }
    }

    /// Bounded label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            RenderError::Invalid { .. } => "Invalid",
            RenderError::UnknownRuntime { .. } => "UnknownRuntime",
            RenderError::MalformedVersion { .. } => "MalformedVersion",
            RenderError::MissingSecret { .. } => "MissingSecret",
            RenderError::MissingSecretKey { .. } => "MissingSecretKey",
            RenderError::Fragment { .. } => "Fragment",
            RenderError::Template { .. } => "Template",
        }
    }
}
