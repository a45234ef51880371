//! What the client commands share, below all of them: the kind a user
//! types (`parse_kind`, and `set_kind` for the commands only MachineSets
//! have), the set a rollout command names ([`Target`]), and the annotation
//! `apply` keeps its last manifest in. Each command's file depends on this
//! and on the API client, never on another command's file, except where it
//! runs that command (`objects` runs `apply`, `rollout` runs
//! `rollout_status`, `show` prints `rollout`'s section).

use clap::Args;

use crate::api::Kind;
use crate::store::DEFAULT_NAMESPACE;

/// Annotation `apply` keeps its last manifest in; hidden from describe.
pub const LAST_APPLIED: &str = "metalherd.dev/last-applied-configuration";

/// Parse a kind typed on the command line, with the fix when unknown.
pub fn parse_kind(s: &str) -> anyhow::Result<Kind> {
    Kind::parse(s).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown kind {s:?}: use machines, machinesets, machineclasses, discovered, secrets, events, leases or namespaces"
        )
    })
}

/// The set a rollout command acts on.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// `machineset` (`ms`).
    pub kind: String,
    pub name: String,
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
}

/// Rollouts and scaling are for MachineSets only.
pub fn set_kind(kind: &str) -> anyhow::Result<Kind> {
    let k = parse_kind(kind)?;
    if k != Kind::MachineSet {
        anyhow::bail!(
            "{} have no rollouts and no scale subresource: use machineset",
            k.plural()
        );
    }
    Ok(k)
}
