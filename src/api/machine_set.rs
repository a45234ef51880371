//! MachineSet: a pool of Machines kept at `replicas`, rolled in batches.
//!
//! Schema only (pure data). The claim on a Machine is a label
//! ([`SET_LABEL`]), never an ownerReference: deleting a set must not delete
//! or retire servers through garbage collection; it releases them.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::LocalObjectReference;
use super::condition::Condition;
use super::machine::MachineOverrides;
use super::machine_class::MachineClassSpec;
use super::remediation::{MachineRemediation, RemediationPolicy};

/// How many passed batches `status.completedBatches` keeps.
pub const BATCH_HISTORY: usize = 10;

/// Label on a Machine naming the set that claimed it.
pub const SET_LABEL: &str = "metalherd.dev/machineset";
/// Label on a claimed Machine: the set revision (a number) it is pinned to.
pub const REVISION_LABEL: &str = "metalherd.dev/machineset-revision";
/// Annotation `rollout undo` sets: the revision the template was reset to
/// (its snapshot is installed while the template still equals it).
pub const UNDO_ANNOTATION: &str = "metalherd.dev/undo-to-revision";
/// Revisions kept when `revisionHistoryLimit` is not given.
pub const DEFAULT_REVISION_HISTORY: i32 = 10;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "metalherd.dev",
    version = "v1alpha1",
    kind = "MachineSet",
    namespaced,
    status = "MachineSetStatus",
    shortname = "ms",
    category = "metalherd",
    derive = "PartialEq",
    derive = "Default",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Updated",
        type_ = "integer",
        json_path = ".status.updatedReplicas"
    ),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas"
    ),
    printcolumn(name = "State", type_ = "string", json_path = ".status.rolloutState"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
// The CEL rule repeats src/api/validate/machine_set.rs (SET_LABEL) so a
// cluster's API server refuses the same selector with the same words.
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.selector.matchLabels) || !('metalherd.dev/machineset' in self.selector.matchLabels)",
    "fieldPath": ".selector.matchLabels",
    "message": "metalherd.dev/machineset is set by metalherd when a set claims a machine; select the pool by other labels",
}]))]
pub struct MachineSetSpec {
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// Which Machines form the pool this set claims from.
    pub selector: LabelSelector,
    pub template: MachineTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    /// Stop starting new batches; the batch in flight finishes its gate.
    #[serde(default)]
    pub paused: bool,
    /// Old revisions kept for `rollout undo` (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub revision_history_limit: Option<i32>,
    /// Power-cycle, then reimage, machines that stay unhealthy (absent:
    /// the set only reports them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<RemediationPolicy>,
}

/// How a set rolls a new revision through its machines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StrategyType {
    /// Reimage each machine in place (same server, same hostname and IP).
    #[default]
    InPlace,
    /// Claim fresh machines and release old ones. Refused at validation
    /// until it exists.
    Replace,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineTemplate {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub class_ref: LocalObjectReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<MachineOverrides>,
}

// The CEL rule repeats src/api/validate/machine_set.rs so a cluster's API
// server refuses `Replace` with the same field and words.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.type) || self.type != 'Replace'",
    "fieldPath": ".type",
    "message": "Replace is not implemented yet; use InPlace (reimage each machine in place)",
}]))]
pub struct UpdateStrategy {
    /// `InPlace` (default). `Replace` is refused until it exists.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<StrategyType>,
    /// Machines out of service at once: a count (`2`) or a percentage of
    /// `replicas` (`"25%"`, rounded down, at least 1). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A batch must pass its gate within this long, or the rollout fails.
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i64>,
    /// Reimage a failed batch back to the last revision that passed.
    #[serde(default)]
    pub auto_rollback: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthCheck {
    /// The Node must stay Ready this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_ready_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_probe: Option<HttpProbe>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpProbe {
    /// URL with `{{address}}` replaced by the machine's address.
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_status: Option<u16>,
}

/// What the set controller observed and decided, kept across restarts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    /// Machines claimed.
    #[serde(default)]
    pub replicas: i32,
    /// Claimed machines in phase Ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Claimed machines pinned to the update revision and installed with it.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Claimed machines Ready and past the health gate of their revision.
    #[serde(default)]
    pub available_replicas: i32,
    /// Claimed machines pinned to the current (last good) revision.
    #[serde(default)]
    pub current_replicas: i32,
    /// Label selector as a string, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The last revision that passed its gate everywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<i64>,
    /// The revision being rolled out (the template's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<i64>,
    /// Kept revisions, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<SetRevision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_state: Option<RolloutState>,
    /// The batch in flight, recorded before its machines are touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_batch: Option<Batch>,
    /// The last 10 batches of the rollout of `updateRevision` already
    /// through the gate, oldest first (batch numbers keep counting).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub completed_batches: Vec<Batch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<RolloutFailure>,
    /// Machines found unhealthy under `spec.remediation`, and what was done
    /// about each (dropped once one has recovered).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remediations: Vec<MachineRemediation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Where a rollout stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutState {
    #[default]
    Progressing,
    Paused,
    Complete,
    Failed,
    RolledBack,
}

impl RolloutState {
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutState::Progressing => "Progressing",
            RolloutState::Paused => "Paused",
            RolloutState::Complete => "Complete",
            RolloutState::Failed => "Failed",
            RolloutState::RolledBack => "RolledBack",
        }
    }
}

/// One numbered revision: what it installs, snapshotted when it was made,
/// so a class edited in place can still be rolled back to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetRevision {
    pub revision: i64,
    /// Hash of the whole snapshot; a machine pinned here is up to date when
    /// it installed this.
    pub hash: String,
    pub class_name: String,
    /// The class's spec as it was when the revision was made.
    pub class_spec: MachineClassSpec,
    /// The template's overrides (set on each pinned Machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<MachineOverrides>,
    #[schemars(with = "String")]
    pub created_at: Timestamp,
    /// Every machine passed the health gate on it.
    #[serde(default)]
    pub passed: bool,
    /// Its rollout failed; not retried until the template changes again.
    #[serde(default)]
    pub bad: bool,
}

/// A batch: machines moved to a revision together.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Batch {
    /// 1, 2, ... within the rollout of `revision`.
    pub number: i32,
    pub revision: i64,
    pub machines: Vec<BatchMachine>,
    #[schemars(with = "String")]
    pub started_at: Timestamp,
    /// A rollback batch (back to `revision`).
    #[serde(default)]
    pub rollback: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub finished_at: Option<Timestamp>,
}

/// A machine of a batch and how far through the gate it is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchMachine {
    pub name: String,
    /// Since when it has been healthy without a break (gate clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub healthy_since: Option<Timestamp>,
    /// Passed the gate.
    #[serde(default)]
    pub passed: bool,
}

/// Why the last rollout failed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutFailure {
    pub revision: i64,
    pub batch: i32,
    pub machines: Vec<String>,
    pub reason: String,
    pub message: String,
    #[schemars(with = "String")]
    pub at: Timestamp,
}
