//! Recording events about objects. Repeats of the same (object, reason,
//! message) are folded into one Event with a count and first/last times, as
//! Kubernetes does. Messages must never carry secret values: callers pass
//! what happened, not what was sent.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use super::modify::{Target, modify_obj};
use super::typed::from_value;
use super::{ListOptions, Store, StoreError};
use crate::api::event::{EventSource, InvolvedObject};
use crate::api::{Event, Kind};

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an event is about.
#[derive(Clone, Debug)]
pub struct Regarding {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

/// Record (or fold into an existing) event. Conflicts from concurrent
/// recorders are retried ([`super::modify`]); events are best-effort and
/// never fail the caller's work, so the error is returned for logging only.
pub async fn record(
    store: &dyn Store,
    about: &Regarding,
    type_: EventType,
    reason: &str,
    message: &str,
) -> Result<(), StoreError> {
    let mut h = Sha256::new();
    for part in [about.kind.as_str(), &about.name, reason, message] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let digest = hex::encode(&h.finalize()[..6]);
    let name = format!("{}.{}", about.name, digest);
    let now = Timestamp::now();
    modify_obj::<Event>(
        store,
        &about.namespace,
        &name,
        Target::ObjectOrCreate,
        |cur| {
            Ok(Some(match cur {
                Some(mut ev) => {
                    ev.count = ev.count.saturating_add(1);
                    ev.last_timestamp = Some(now);
                    ev
                }
                None => Event {
                    api_version: "v1".into(),
                    kind: "Event".into(),
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(about.namespace.clone()),
                        ..Default::default()
                    },
                    involved_object: InvolvedObject {
                        api_version: about.kind.api_version().into(),
                        kind: about.kind.as_str().into(),
                        namespace: about.namespace.clone(),
                        name: about.name.clone(),
                        uid: about.uid.clone(),
                    },
                    type_: type_.as_str().into(),
                    reason: reason.into(),
                    message: message.into(),
                    count: 1,
                    first_timestamp: Some(now),
                    last_timestamp: Some(now),
                    source: Some(EventSource {
                        component: "metalherd".into(),
                    }),
                },
            }))
        },
    )
    .await
    .map(|_| ())
}

/// Events about one object, oldest first by last occurrence.
pub async fn list_for(
    store: &dyn Store,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Vec<Event>, StoreError> {
    let list = store
        .list(Kind::Event, &ListOptions::namespace(namespace))
        .await?;
    let mut out: Vec<Event> = list
        .items
        .into_iter()
        .filter_map(|v| from_value::<Event>(v).ok())
        .filter(|e| e.involved_object.kind == kind.as_str() && e.involved_object.name == name)
        .collect();
    out.sort_by_key(|e| e.last_timestamp);
    Ok(out)
}
