//! The shared store suite (`suite.rs`) run against the in-process
//! backends, and what only they promise.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::api::Kind;

#[macro_use]
#[path = "suite.rs"]
mod suite;

use suite::{machine, rv};

mod embedded {
    async fn open() -> super::suite::Opened {
        let dir = tempfile::tempdir().unwrap();
        let s = crate::store::open(&crate::store::StoreConfig::Embedded {
            path: dir.path().join("store.redb"),
            history: crate::store::embedded::DEFAULT_HISTORY,
        })
        .await
        .unwrap();
        (Box::new(dir), s)
    }
    all_tests!(open);
}

mod memory {
    async fn open() -> super::suite::Opened {
        (
            Box::new(()),
            crate::store::open(&crate::store::StoreConfig::Memory)
                .await
                .unwrap(),
        )
    }
    all_tests!(open);
}

mod cached {
    async fn open() -> super::suite::Opened {
        let inner = crate::store::open(&crate::store::StoreConfig::Memory)
            .await
            .unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        let s = crate::store::cache::CachingStore::new(inner, cancel.clone());
        (Box::new(cancel.drop_guard()), std::sync::Arc::new(s))
    }
    all_tests!(open);
}

/// A refused write leaves the list's version as it was. The in-process
/// backends promise this; a Kubernetes list's version moves with any write
/// anywhere in the cluster.
async fn a_refused_write_does_not_move_the_list_version(s: Arc<dyn Store>) {
    let l = s
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap();
    let mut bad = machine("m1", json!({}));
    bad["spec"]["bootMACAddress"] = json!("nope");
    assert!(s.create(Kind::Machine, bad).await.is_err());
    let again = s
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(again.resource_version, l.resource_version);
}

#[tokio::test]
async fn a_refused_write_does_not_move_the_list_version_in_memory() {
    a_refused_write_does_not_move_the_list_version(Arc::new(
        crate::store::memory::MemoryStore::new(),
    ))
    .await;
}

#[tokio::test]
async fn a_refused_write_does_not_move_the_list_version_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&StoreConfig::Embedded {
        path: dir.path().join("store.redb"),
        history: crate::store::embedded::DEFAULT_HISTORY,
    })
    .await
    .unwrap();
    a_refused_write_does_not_move_the_list_version(s).await;
}

/// Only the memory store lets a test shorten its log; the embedded one
/// keeps 50,000 changes, too many to write in a unit test.
#[tokio::test]
async fn a_watch_from_before_the_kept_log_is_gone() {
    let s = crate::store::memory::MemoryStore::with_log_limit(3);
    let m = s
        .create(Kind::Machine, machine("m1", json!({})))
        .await
        .unwrap();
    let from = rv(&m);
    let mut cur = m;
    for i in 0..5 {
        cur["metadata"]["labels"] = json!({"i": i.to_string()});
        cur = s.update(Kind::Machine, cur).await.unwrap();
    }
    let e = s
        .watch(Kind::Machine, &ListOptions::default(), Some(&from))
        .await
        .err()
        .expect("gone");
    assert!(matches!(e, StoreError::Gone { .. }), "{e}");
    // From the list's version it works again.
    let l = s
        .list(Kind::Machine, &ListOptions::default())
        .await
        .unwrap();
    let _w = s
        .watch(
            Kind::Machine,
            &ListOptions::default(),
            Some(&l.resource_version),
        )
        .await
        .unwrap();
}
