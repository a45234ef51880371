//! Controllers: the runner (queue, backoff, requeue) and the Machine and
//! MachineSet reconcilers. They reach objects only through `store::Store`.
