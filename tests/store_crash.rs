//! The embedded store survives `kill -9` in the middle of a burst of writes:
//! after restart it opens cleanly and every acknowledged write is there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use metalherd::api::Kind;
use metalherd::store::embedded::EmbeddedStore;
use metalherd::store::{ListOptions, Store};
use serde_json::json;

const CHILD_ENV: &str = "METALHERD_STORE_BURST_PATH";

/// The writer: runs only when re-executed by the parent with the env var.
#[tokio::test]
async fn burst_writer_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let s = EmbeddedStore::open(std::path::Path::new(&path)).unwrap();
    for i in 0..1000 {
        let name = format!("m{i:04}");
        let obj = json!({
            "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": name},
            "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}
        });
        s.create(Kind::Machine, obj).await.unwrap();
        // Acknowledged: the create returned, so it was committed.
        println!("ACK {name}");
    }
    println!("DONE");
}

#[test]
fn store_survives_kill_9_mid_burst() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "burst_writer_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut acked = Vec::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        if let Some(name) = line.strip_prefix("ACK ") {
            acked.push(name.to_string());
            if acked.len() == 300 {
                // SIGKILL while the writer is mid-burst.
                child.kill().unwrap();
                break;
            }
        }
        assert_ne!(line, "DONE", "writer finished before it could be killed");
    }
    child.wait().unwrap();
    assert_eq!(acked.len(), 300);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let s = EmbeddedStore::open(&path).expect("store reopens cleanly after kill -9");
        let list = s
            .list(Kind::Machine, &ListOptions::default())
            .await
            .unwrap();
        let names: std::collections::HashSet<String> = list
            .items
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        for a in &acked {
            assert!(names.contains(a), "acknowledged write {a} lost");
        }
        assert!(names.len() >= acked.len());
        // The store still takes writes after recovery.
        let obj = json!({
            "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
            "metadata": {"name": "after-restart"},
            "spec": {"bmc": {"address": "ipmi://10.0.0.5", "credentialsSecretRef": {"name": "bmc"}}}
        });
        s.create(Kind::Machine, obj).await.unwrap();
    });
}
