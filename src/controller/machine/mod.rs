//! The Machine controller. [`plan`] holds the lifecycle as data and
//! [`decide`] is the pure function from (Machine, what was observed, now)
//! to the next steps; an executor (BMC, store, target cluster) carries them
//! out.

mod bios;
pub(crate) mod boot;
pub mod class_view;
pub mod decide;
pub mod execute;
mod firmware;
pub mod hw_labels;
pub mod loader;
pub mod plan;
pub mod reconcile;
mod remediate;
mod volumes;

#[cfg(test)]
mod tests;

pub use decide::decide;
pub use plan::{
    BmcObserved, BootPurpose, ClassObserved, ClassView, Limits, NodeObserved, Observed, Plan, Step,
    desired_revision,
};
pub use reconcile::MachineReconciler;
