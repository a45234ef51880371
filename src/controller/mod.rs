//! Controllers: the runner (queue, backoff, requeue, concurrency), the
//! boot-storm limit, the Machine lifecycle and MachineSet rollouts. They reach objects only
//! through `store::Store` and the target cluster only through
//! `cluster::TargetCluster`.

pub mod config;
pub mod feed;
pub mod machine;
pub mod machine_set;
pub mod queue;
pub mod remediation;
pub mod runner;
pub mod start;
pub mod storm;
