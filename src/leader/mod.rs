//! Leader election for Kubernetes mode: replicas compete for one
//! `coordination.k8s.io/v1` Lease; only the holder runs the controllers and
//! the boot services. [`decide`] is the pure rule, [`elector`] reads and
//! writes the Lease through the store, [`fence`] keeps a replica that lost
//! the Lease from touching any BMC, [`token_key`] shares the per-boot token
//! key between replicas through a Secret.

pub mod decide;
pub mod elector;
pub mod fence;
pub mod token_key;

pub use decide::{Decision, LostBecause, Timing, TimingError};
pub use elector::{Candidate, Elector, Ended, default_identity};
pub use fence::FencedConnector;
