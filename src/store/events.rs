//! Recording events about objects. Repeats of the same (object, reason) are
//! folded into one Event with a count, first/last times and the latest
//! message, so a flood (every packet from a new address, say) makes one
//! object per object and reason, not one per message. Events expire
//! ([`expire`]) a while after their last occurrence, as Kubernetes' do
//! (an hour by default). Messages must never carry secret values: callers
//! pass what happened, not what was sent.

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
    for part in [about.kind.as_str(), &about.name, reason] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let digest = hex::encode(&h.finalize()[..6]);
    let name = format!("{}.{}", about.name, digest);
    let now = Timestamp::now();
    let fresh = || Event {
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
    };
    // Most events are the first of their (object, reason): create it in
    // one call (in Kubernetes mode each call is an API request), and fold
    // into the existing one only when the name is taken.
    let first = serde_json::to_value(fresh()).map_err(|e| StoreError::Malformed(e.to_string()))?;
    match store.create(Kind::Event, first).await {
        Ok(_) => return Ok(()),
        Err(StoreError::AlreadyExists { .. }) => {}
        Err(e) => return Err(e),
    }
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
                    ev.message = message.into();
                    ev.type_ = type_.as_str().into();
                    ev
                }
                None => fresh(),
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

/// Delete the Events whose last occurrence is more than `ttl` before
/// `now`; returns how many went. One that changes meanwhile is left for
/// the next pass.
pub async fn expire(
    store: &dyn Store,
    ttl: std::time::Duration,
    now: Timestamp,
) -> Result<usize, StoreError> {
    let list = store.list(Kind::Event, &ListOptions::default()).await?;
    let ttl = jiff::SignedDuration::try_from(ttl).unwrap_or(jiff::SignedDuration::MAX);
    let mut gone = 0;
    for v in list.items {
        let Ok(ev) = from_value::<Event>(v) else {
            continue;
        };
        let last = ev.last_timestamp.or(ev.first_timestamp);
        let old = last.is_none_or(|t| now.duration_since(t) > ttl);
        if !old {
            continue;
        }
        let ns = ev.metadata.namespace.clone().unwrap_or_default();
        let Some(name) = ev.metadata.name.clone() else {
            continue;
        };
        match store.delete(Kind::Event, &ns, &name).await {
            Ok(_) => gone += 1,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(gone)
}

/// Run [`expire`] every `ttl / 2` (between 1 s and a minute) until
/// `cancel`.
pub async fn expire_loop(
    store: std::sync::Arc<dyn Store>,
    ttl: std::time::Duration,
    cancel: tokio_util::sync::CancellationToken,
) {
    let every = (ttl / 2).clamp(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(60),
    );
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        match expire(store.as_ref(), ttl, Timestamp::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(expired = n, "events expired"),
            Err(e) => tracing::warn!(error = %e, "cannot expire events"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    fn about(name: &str) -> Regarding {
        Regarding {
            kind: Kind::Machine,
            namespace: "default".into(),
            name: name.into(),
            uid: None,
        }
    }

    async fn events(s: &dyn Store) -> Vec<Event> {
        s.list(Kind::Event, &ListOptions::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|v| from_value::<Event>(v).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn a_flood_from_many_sources_folds_into_one_event_per_object_and_reason() {
        let s = MemoryStore::new();
        for i in 0..50 {
            let msg = format!("config requested from 10.0.0.{i}");
            record(&s, &about("m1"), EventType::Warning, "ConfigRefused", &msg)
                .await
                .unwrap();
        }
        record(&s, &about("m1"), EventType::Normal, "Provisioned", "done")
            .await
            .unwrap();
        record(&s, &about("m2"), EventType::Warning, "ConfigRefused", "x")
            .await
            .unwrap();
        let evs = events(&s).await;
        assert_eq!(evs.len(), 3);
        let folded = evs
            .iter()
            .find(|e| e.involved_object.name == "m1" && e.reason == "ConfigRefused")
            .unwrap();
        assert_eq!(folded.count, 50);
        assert_eq!(folded.message, "config requested from 10.0.0.49");
    }

    #[tokio::test]
    async fn events_expire_a_ttl_after_their_last_occurrence() {
        let s = MemoryStore::new();
        record(&s, &about("m1"), EventType::Normal, "Old", "a")
            .await
            .unwrap();
        let ttl = std::time::Duration::from_secs(3600);
        let now = Timestamp::now();
        assert_eq!(expire(&s, ttl, now).await.unwrap(), 0);
        let later = now + jiff::SignedDuration::from_secs(3601);
        record(&s, &about("m1"), EventType::Normal, "Recent", "b")
            .await
            .unwrap();
        // "Recent" was recorded now too: only a pass an hour on removes both.
        assert_eq!(expire(&s, ttl, later).await.unwrap(), 2);
        assert!(events(&s).await.is_empty());
        // An event that occurred again is kept a TTL from its last time.
        record(&s, &about("m1"), EventType::Normal, "Again", "c")
            .await
            .unwrap();
        assert_eq!(expire(&s, ttl, Timestamp::now()).await.unwrap(), 0);
        assert_eq!(events(&s).await.len(), 1);
    }
}
