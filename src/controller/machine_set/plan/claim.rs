//! Why a candidate machine may not be claimed by a set: the reasons the
//! planner lists after `wanted N, claimable M` in `PoolShort`. Pure.

use crate::api::MachinePhase;

/// Why a machine may not be claimed now, as shown to users in the
/// `PoolSufficient` condition's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotClaimable {
    /// Its owner said hands off (`metalherd.dev/paused`).
    #[error("paused (metalherd.dev/paused)")]
    Paused,
    /// Neither Available nor Ready.
    #[error("phase {}", .0.as_str())]
    Phase(MachinePhase),
    /// Not Ready, so not looked at for adoption.
    #[error("not Ready")]
    NotReady,
    /// Ready, but it names no class to compare with the template's.
    #[error("Ready without a class")]
    NoClass,
    #[error("has spec.classRef {class}, the template names {template}")]
    OtherClass { class: String, template: String },
    #[error("has spec.classRef {class} with overrides other than the template's")]
    OtherOverrides { class: String },
    /// The template's class, but not up to date with it.
    #[error("has spec.classRef {class} but does not run its current revision")]
    NotUpToDate { class: String },
}
