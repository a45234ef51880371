//! Cluster API infrastructure provider (Kubernetes mode): Cluster API's
//! KubeadmControlPlane and MachineDeployments decide which machines exist;
//! metalherd claims a server for each MetalherdMachine, installs it with
//! the bootstrap data Cluster API wrote, and reports it back under the
//! v1beta2 provider contract.
//!
//! - [`api`]: the provider's objects and CRDs.
//! - [`claim`]: which server a MetalherdMachine claims (pure), the reuse rule.

pub mod api;
pub mod claim;
pub mod reconcile;
pub mod start;
