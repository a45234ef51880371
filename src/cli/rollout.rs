//! `metalherd scale machineset NAME --replicas N` (through the `/scale`
//! subresource) and `metalherd rollout history|pause|resume|undo
//! machineset NAME`: edits of the set through the API, as `kubectl scale`
//! and `kubectl rollout` do for Deployments. `rollout status` lives in
//! [`super::rollout_status`].

use std::collections::BTreeMap;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::GlobalArgs;
use super::client::ApiClient;
use super::kinds::{Target, set_kind};
use crate::api::Kind;
use crate::api::machine_set::{REVISION_LABEL, SET_LABEL, SetRevision, UNDO_ANNOTATION};
use crate::store::DEFAULT_NAMESPACE;

#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// `machineset` (the only kind with a scale subresource).
    pub kind: String,
    pub name: String,
    /// The new replica count.
    #[arg(long)]
    pub replicas: i32,
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub command: RolloutCommand,
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Follow a rollout batch by batch until it completes (exit 0) or
    /// fails (exit 1).
    Status(super::rollout_status::StatusArgs),
    /// List the kept revisions (or show one with `--revision`).
    History(HistoryArgs),
    /// Start no new batch (the batch in flight finishes its gate).
    Pause(Target),
    /// Start batches again.
    Resume(Target),
    /// Roll back to a kept revision (default: the one before the update).
    Undo(UndoArgs),
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub target: Target,
    /// Show what this revision installs (its class snapshot) as YAML.
    #[arg(long)]
    pub revision: Option<i64>,
}

#[derive(Debug, Args)]
pub struct UndoArgs {
    #[command(flatten)]
    pub target: Target,
    /// The kept revision to return to.
    #[arg(long)]
    pub to_revision: Option<i64>,
}

pub async fn scale(g: &GlobalArgs, a: ScaleArgs) -> anyhow::Result<()> {
    let kind = set_kind(&a.kind)?;
    if a.replicas < 0 {
        anyhow::bail!("--replicas must be 0 or more, got {}", a.replicas);
    }
    let client = ApiClient::from_global(g)?;
    let before = client.get_scale(kind, &a.namespace, &a.name).await?;
    let after = client
        .patch_scale(
            kind,
            &a.namespace,
            &a.name,
            &json!({"spec": {"replicas": a.replicas}}),
        )
        .await?;
    println!(
        "machineset \"{}\" scaled from {} to {} replicas",
        a.name, before["spec"]["replicas"], after["spec"]["replicas"]
    );
    Ok(())
}

pub async fn run(g: &GlobalArgs, a: RolloutArgs) -> anyhow::Result<()> {
    match a.command {
        RolloutCommand::Status(s) => super::rollout_status::run(g, s).await,
        RolloutCommand::History(h) => history(g, h).await,
        RolloutCommand::Pause(t) => set_paused(g, t, true).await,
        RolloutCommand::Resume(t) => set_paused(g, t, false).await,
        RolloutCommand::Undo(u) => undo(g, u).await,
    }
}

fn revisions(set: &Value) -> anyhow::Result<Vec<SetRevision>> {
    let v = set
        .pointer("/status/revisions")
        .cloned()
        .unwrap_or_else(|| json!([]));
    serde_json::from_value(v).context("decode status.revisions")
}

fn status_i64(set: &Value, field: &str) -> Option<i64> {
    set.get("status")?.get(field)?.as_i64()
}

async fn set_paused(g: &GlobalArgs, t: Target, paused: bool) -> anyhow::Result<()> {
    let kind = set_kind(&t.kind)?;
    let client = ApiClient::from_global(g)?;
    client
        .patch(
            kind,
            &t.namespace,
            &t.name,
            &json!({"spec": {"paused": paused}}),
        )
        .await?;
    let what = if paused { "paused" } else { "resumed" };
    println!("machineset \"{}\" {what}", t.name);
    Ok(())
}

/// The words of a revision's STATUS column.
fn revision_state(r: &SetRevision, set: &Value) -> String {
    let current = status_i64(set, "currentRevision");
    let update = status_i64(set, "updateRevision");
    let state = set
        .pointer("/status/rolloutState")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut words = Vec::new();
    if current == Some(r.revision) {
        words.push("current".to_string());
    }
    if update == Some(r.revision) && current != Some(r.revision) && !r.bad {
        words.push(if state == "Paused" {
            "rolling out (paused)".into()
        } else {
            "rolling out".into()
        });
    }
    if r.bad {
        words.push("bad (its rollout failed)".into());
    } else if r.passed && current != Some(r.revision) {
        words.push("passed".into());
    }
    if words.is_empty() {
        "-".into()
    } else {
        words.join(", ")
    }
}

/// The history table: one row per kept revision, oldest first, with how
/// many of the set's machines are pinned to it.
pub fn history_table(set: &Value, pinned: &BTreeMap<i64, usize>) -> anyhow::Result<String> {
    let revs = revisions(set)?;
    let mut rows = vec![[
        "REVISION".to_string(),
        "CLASS".into(),
        "IMAGE".into(),
        "MACHINES".into(),
        "CREATED".into(),
        "STATUS".into(),
    ]];
    for r in &revs {
        let image = &r.class_spec.image;
        rows.push([
            r.revision.to_string(),
            r.class_name.clone(),
            format!("{} {}", image.os, image.version),
            pinned.get(&r.revision).copied().unwrap_or(0).to_string(),
            r.created_at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            revision_state(r, set),
        ]);
    }
    let mut widths = [0usize; 6];
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    Ok(out)
}

/// What `describe machineset` shows of its rollouts: the kept revisions,
/// the batch in flight with each member's gate, the batches passed, and
/// the last failure.
pub fn describe_rollout(set: &Value) -> String {
    let mut out = String::new();
    let revs = revisions(set).unwrap_or_default();
    if !revs.is_empty() {
        out.push_str("Revisions:\n");
        for r in &revs {
            let image = &r.class_spec.image;
            out.push_str(&format!(
                "  {}  class {} ({} {}), hash {}, made {}: {}\n",
                r.revision,
                r.class_name,
                image.os,
                image.version,
                r.hash,
                r.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                revision_state(r, set)
            ));
        }
    }
    let st = &set["status"];
    let members = |b: &Value| -> String {
        let m: Vec<String> = b["machines"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                let name = m["name"].as_str().unwrap_or_default();
                if m["passed"] == true {
                    format!("{name} (passed)")
                } else if let Some(t) = m["healthySince"].as_str() {
                    format!("{name} (healthy since {t})")
                } else {
                    name.to_string()
                }
            })
            .collect();
        m.join(", ")
    };
    if let Some(b) = st.get("currentBatch").filter(|b| b.is_object()) {
        let what = if b["rollback"] == true {
            "rollback batch"
        } else {
            "batch"
        };
        out.push_str(&format!(
            "Current Batch: {what} {} to revision {}, started {}: {}\n",
            b["number"],
            b["revision"],
            b["startedAt"].as_str().unwrap_or_default(),
            members(b)
        ));
    }
    for b in st["completedBatches"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "Passed Batch:  {} of revision {}: {}\n",
            b["number"],
            b["revision"],
            members(b)
        ));
    }
    if let Some(f) = st.get("lastFailure").filter(|f| f.is_object()) {
        out.push_str(&format!(
            "Last Failure:  {} at {}: {}\n",
            f["reason"].as_str().unwrap_or_default(),
            f["at"].as_str().unwrap_or_default(),
            f["message"].as_str().unwrap_or_default()
        ));
    }
    out
}

async fn history(g: &GlobalArgs, h: HistoryArgs) -> anyhow::Result<()> {
    let t = h.target;
    let kind = set_kind(&t.kind)?;
    let client = ApiClient::from_global(g)?;
    let set = client.get(kind, &t.namespace, &t.name).await?;
    if let Some(n) = h.revision {
        let revs = revisions(&set)?;
        let r = revs
            .iter()
            .find(|r| r.revision == n)
            .with_context(|| format!("revision {n} is not kept ({})", kept(&revs)))?;
        print!("{}", serde_yaml::to_string(r).context("encode YAML")?);
        return Ok(());
    }
    let machines = client
        .list(
            Kind::Machine,
            Some(&t.namespace),
            Some(&format!("{SET_LABEL}={}", t.name)),
        )
        .await?;
    let mut pinned: BTreeMap<i64, usize> = BTreeMap::new();
    for m in machines["items"].as_array().into_iter().flatten() {
        let rev = m
            .pointer("/metadata/labels")
            .and_then(|l| l.get(REVISION_LABEL))
            .and_then(Value::as_str)
            .and_then(|r| r.parse().ok());
        if let Some(r) = rev {
            *pinned.entry(r).or_default() += 1;
        }
    }
    println!("machineset \"{}\"", t.name);
    print!("{}", history_table(&set, &pinned)?);
    Ok(())
}

fn kept(revs: &[SetRevision]) -> String {
    let n: Vec<String> = revs.iter().map(|r| r.revision.to_string()).collect();
    if n.is_empty() {
        "none kept".into()
    } else {
        format!("kept: {}", n.join(", "))
    }
}

/// Which revision `undo` returns to: the one asked for, else the newest
/// kept revision before the update revision that is not bad.
pub fn undo_target(set: &Value, to: Option<i64>) -> anyhow::Result<SetRevision> {
    let revs = revisions(set)?;
    let update = status_i64(set, "updateRevision");
    let r = match to {
        Some(n) => revs
            .iter()
            .find(|r| r.revision == n)
            .with_context(|| format!("revision {n} is not kept ({})", kept(&revs)))?,
        None => revs
            .iter()
            .filter(|r| Some(r.revision) < update && !r.bad)
            .max_by_key(|r| r.revision)
            .with_context(|| {
                format!(
                    "no earlier revision to return to ({}; update revision {})",
                    kept(&revs),
                    update.map_or("none".into(), |u| u.to_string())
                )
            })?,
    };
    if r.bad {
        anyhow::bail!(
            "revision {} is marked bad (its rollout failed); change the template to try it again",
            r.revision
        );
    }
    Ok(r.clone())
}

async fn undo(g: &GlobalArgs, u: UndoArgs) -> anyhow::Result<()> {
    let t = u.target;
    let kind = set_kind(&t.kind)?;
    let client = ApiClient::from_global(g)?;
    let set = client.get(kind, &t.namespace, &t.name).await?;
    let r = undo_target(&set, u.to_revision)?;
    if status_i64(&set, "updateRevision") == Some(r.revision) {
        println!(
            "machineset \"{}\" skipped rollback (revision {} is already the one rolled out)",
            t.name, r.revision
        );
        return Ok(());
    }
    // The template goes back to what the revision was made from; the
    // annotation names the revision, so its snapshot is what is installed
    // even when the class was edited since. The resourceVersion makes the
    // edit conditional on the set as read.
    let patch = json!({
        "metadata": {
            "resourceVersion": set.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null),
            "annotations": {UNDO_ANNOTATION: r.revision.to_string()},
        },
        "spec": {"template": {
            "classRef": {"name": r.class_name},
            "overrides": r.overrides,
        }},
    });
    client.patch(kind, &t.namespace, &t.name, &patch).await?;
    println!(
        "machineset \"{}\" rolled back to revision {} (class {})",
        t.name, r.revision, r.class_name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Value {
        let mut spec = serde_json::to_value(crate::api::MachineClassSpec::default()).unwrap();
        spec["image"]["os"] = json!("flatcar");
        spec["image"]["version"] = json!("1.0");
        let rev = |n: i64, passed: bool, bad: bool| {
            json!({"revision": n, "hash": format!("h{n}"), "className": format!("c{n}"),
                "classSpec": spec, "createdAt": "2026-01-02T03:04:05Z",
                "passed": passed, "bad": bad})
        };
        json!({"metadata": {"name": "w"}, "status": {
            "currentRevision": 2, "updateRevision": 3, "rolloutState": "Progressing",
            "revisions": [rev(1, true, false), rev(2, true, false), rev(3, false, false)]}})
    }

    #[test]
    fn undo_goes_to_the_newest_earlier_good_revision() {
        let mut s = set();
        assert_eq!(undo_target(&s, None).unwrap().revision, 2);
        assert_eq!(undo_target(&s, Some(1)).unwrap().revision, 1);
        let e = undo_target(&s, Some(7)).unwrap_err().to_string();
        assert!(e.contains("not kept (kept: 1, 2, 3)"), "{e}");
        s["status"]["revisions"][1]["bad"] = json!(true);
        assert_eq!(undo_target(&s, None).unwrap().revision, 1);
        assert!(undo_target(&s, Some(2)).is_err());
    }

    #[test]
    fn history_lists_revisions_with_their_state_and_machines() {
        let pinned = BTreeMap::from([(2, 3), (3, 1)]);
        let t = history_table(&set(), &pinned).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("REVISION   CLASS   IMAGE"), "{t}");
        assert!(
            lines[1].starts_with("1          c1      flatcar 1.0   0"),
            "{t}"
        );
        assert!(lines[1].ends_with("passed"), "{t}");
        assert!(lines[2].ends_with("current"), "{t}");
        assert!(
            lines[3].contains(" 1 ") && lines[3].ends_with("rolling out"),
            "{t}"
        );
    }

    #[test]
    fn describe_shows_revisions_batches_and_the_failure() {
        let mut s = set();
        s["status"]["currentBatch"] = json!({"number": 2, "revision": 3, "rollback": false,
            "startedAt": "2026-01-02T03:05:00Z",
            "machines": [{"name": "m3", "passed": true}, {"name": "m4"}]});
        s["status"]["completedBatches"] = json!([{"number": 1, "revision": 3,
            "startedAt": "2026-01-02T03:04:30Z", "machines": [{"name": "m1", "passed": true}]}]);
        s["status"]["lastFailure"] = json!({"reason": "MachineFailed", "at": "2026-01-01T00:00:00Z",
            "message": "batch 1 of revision 9 failed: m9: machine went to Error"});
        let d = describe_rollout(&s);
        assert!(
            d.starts_with("Revisions:\n  1  class c1 (flatcar 1.0), hash h1"),
            "{d}"
        );
        assert!(
            d.contains(
                "  3  class c3 (flatcar 1.0), hash h3, made 2026-01-02T03:04:05Z: rolling out\n"
            ),
            "{d}"
        );
        assert!(d.contains("Current Batch: batch 2 to revision 3, started 2026-01-02T03:05:00Z: m3 (passed), m4\n"), "{d}");
        assert!(
            d.contains("Passed Batch:  1 of revision 3: m1 (passed)\n"),
            "{d}"
        );
        assert!(
            d.contains(
                "Last Failure:  MachineFailed at 2026-01-01T00:00:00Z: batch 1 of revision 9 failed"
            ),
            "{d}"
        );
    }

    #[test]
    fn only_machinesets_roll() {
        assert!(set_kind("ms").is_ok());
        assert!(set_kind("machines").is_err());
    }
}
