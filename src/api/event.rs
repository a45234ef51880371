//! Events about objects, in the core/v1 Event shape (the subset we use).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// `core/v1` Event: what happened to which object, how often, first and last.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(default = "event_api_version")]
    pub api_version: String,
    #[serde(default = "event_kind")]
    pub kind: String,
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    pub involved_object: InvolvedObject,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
    #[serde(default = "one")]
    pub count: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_timestamp: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_timestamp: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<EventSource>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvolvedObject {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventSource {
    pub component: String,
}

fn event_api_version() -> String {
    "v1".into()
}
fn event_kind() -> String {
    "Event".into()
}
fn one() -> i32 {
    1
}
