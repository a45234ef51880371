//! The target Kubernetes cluster: Node lookup, cordon, drain by eviction and
//! delete, behind a trait with a kube-rs implementation.
