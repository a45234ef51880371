//! The MachineSet controller. [`plan`] decides (pure); [`reconcile`] gathers
//! what it needs (the set, its claimed machines, its pool, the live class,
//! health probes) and carries the plan out: status first, then the claims,
//! pins and releases on Machines, each with optimistic concurrency. The
//! Machines it plans from come from [`cache`], a watch-fed view of parsed
//! Machines, not from a store list per reconcile.
//!
//! The set never reimages a server itself: re-pinning a Machine to another
//! revision is what makes the Machine controller reimage it (rendered from
//! the revision's snapshot), with the boot-storm limit applying as usual.

pub mod cache;
pub mod metrics;
pub mod plan;
pub mod probe;
pub mod reconcile;
pub mod revision;
pub mod start;

pub use reconcile::MachineSetReconciler;

#[cfg(test)]
mod tests_store;
