//! Typed Ignition (spec 3.3.0) and pure rendering of a Machine's install,
//! node and wipe configs from its MachineClass.
//!
//! - [`spec`]: serde structs for the part of the spec metalherd emits.
//! - [`render()`]: `(Stage, Machine, MachineClass, secrets, per-boot context)
//!   -> Config`, refusing bad input with a [`RenderError`] naming the field.
//! - [`templates`]: the text inside files lives in askama templates under
//!   `ignition/`; values are checked before they reach a template.
//! - [`merge`]: class fragments become `ignition.config.merge` entries.
//! - [`redact()`]: the config with secret values replaced by `<redacted>`.
//!
//! No sockets, files or clocks here, and never an import of `controller`:
//! the HTTP boot service serves what this module renders.

pub mod bootstrap;
pub mod error;
mod install;
mod join;
pub mod merge;
mod node;
pub mod redact;
pub mod render;
pub mod spec;
pub mod templates;
mod wipe;

pub use error::RenderError;
pub use redact::{REDACTED, redact};
pub use render::{
    NodeConfigSource, RenderContext, RenderSecrets, Stage, TOKEN_KEY, render, to_json,
};
pub use spec::Config;

/// The config with the join token, the per-boot token and the contents of
/// bootstrap data files redacted.
pub fn redacted(config: &Config, secrets: &RenderSecrets, ctx: &RenderContext) -> Config {
    let mut hidden = vec![secrets.join_token(), ctx.boot_token.as_str()];
    // Cluster API's bootstrap data carries a bootstrap token, and for a
    // control plane its CA and keys: every file in it is hidden.
    let contents = secrets
        .bootstrap()
        .map(bootstrap::secret_contents)
        .unwrap_or_default();
    hidden.extend(contents.iter().map(String::as_str));
    redact(config, &hidden)
}
