//! `metalherd rollout status machineset NAME`: follow a rollout from two
//! watches (the set, and the Machines it claims), no polling. Prints each
//! batch when the controller records it, each batch that passes its gate,
//! each machine's phase as it moves, and the set's counts; exits 0 when
//! the rollout is complete, 1 when it failed (or was rolled back) or
//! `--timeout` passed first.
//!
//! A class edited in place makes a new revision without moving the set's
//! generation, so the set's status alone cannot say whether it describes
//! the rollout wanted now: the class is watched too, and a status counts
//! only once its `updateRevision` is the revision the template with the
//! class as it is now makes (the controller's own answer, from
//! [`revision::target`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use futures::future::Either;
use serde_json::Value;

use super::GlobalArgs;
use super::client::ApiClient;
use super::kinds::{Target, set_kind};
use crate::api::Kind;
use crate::api::machine_set::{REVISION_LABEL, RolloutState, SET_LABEL};
use crate::api::{ConditionStatus, MachineClassSpec, MachineSet};
use crate::controller::machine_set::revision;

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub target: Target,
    /// Give up after this long (`90s`, `10m`, `1h`; `0`: wait for ever).
    #[arg(long, default_value = "0", value_parser = parse_timeout)]
    pub timeout: Duration,
}

/// `90`, `90s`, `10m`, `1h`.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let (n, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = n
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: use 90s, 10m or 1h"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("invalid duration {s:?}: use 90s, 10m or 1h")),
    };
    Ok(Duration::from_secs(secs))
}

/// Where a watched rollout stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Waiting,
    Complete(String),
    Failed(String),
}

impl Verdict {
    /// How the command ends, once it does: the completion line printed
    /// and success, or the failure as the error.
    fn end(self) -> Option<anyhow::Result<()>> {
        match self {
            Verdict::Waiting => None,
            Verdict::Complete(s) => {
                println!("{s}");
                Some(Ok(()))
            }
            Verdict::Failed(s) => Some(Err(anyhow::anyhow!(s))),
        }
    }
}

/// What was printed already, so each change is printed once.
#[derive(Debug, Default)]
pub struct Tracker {
    name: String,
    /// (revision, number, rollback) of the batch in flight last seen.
    batch: Option<(i64, i64, bool)>,
    passed: BTreeSet<(i64, i64)>,
    counts: String,
    note: String,
    phases: BTreeMap<String, String>,
}

fn i(v: &Value, p: &str) -> i64 {
    v.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

/// ` (PoolShort: why)` when the set's pool is short, else nothing.
fn short_reason(set: &Value) -> String {
    set["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "PoolSufficient" && c["status"] == ConditionStatus::False.as_str())
        .map(|c| {
            format!(
                " ({}: {})",
                c["reason"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default()
            )
        })
        .unwrap_or_default()
}

fn names(batch: &Value) -> String {
    let n: Vec<&str> = batch["machines"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["name"].as_str())
        .collect();
    n.join(", ")
}

impl Tracker {
    pub fn new(name: &str) -> Tracker {
        Tracker {
            name: name.to_string(),
            ..Default::default()
        }
    }

    fn note(&mut self, line: String, out: &mut Vec<String>) {
        if self.note != line {
            out.push(line.clone());
            self.note = line;
        }
    }

    /// A new state of the set, with the class its template names as it is
    /// now (`None`: it does not exist): lines to print, and the verdict.
    pub fn set(&mut self, set: &Value, class: Option<&Value>, out: &mut Vec<String>) -> Verdict {
        let generation = i(set, "/metadata/generation");
        let observed = i(set, "/status/observedGeneration");
        if observed < generation {
            self.note(
                format!("Waiting for the controller to observe generation {generation}"),
                out,
            );
            return Verdict::Waiting;
        }
        if let Some(wait) = unrecorded(set, class) {
            self.note(wait, out);
            return Verdict::Waiting;
        }
        let st = &set["status"];
        for b in st["completedBatches"].as_array().into_iter().flatten() {
            let key = (i(b, "/revision"), i(b, "/number"));
            if self.passed.insert(key) {
                out.push(format!(
                    "batch {} of revision {} passed its gate: {}",
                    key.1,
                    key.0,
                    names(b)
                ));
            }
        }
        let cur = st.get("currentBatch").filter(|b| b.is_object());
        let key = cur.map(|b| {
            (
                i(b, "/revision"),
                i(b, "/number"),
                b["rollback"].as_bool().unwrap_or(false),
            )
        });
        if key != self.batch {
            if let (Some(b), Some((rev, n, rollback))) = (cur, key) {
                let what = if rollback {
                    format!("rollback batch {n} to revision {rev}")
                } else {
                    format!("batch {n} of revision {rev}")
                };
                out.push(format!("{what} started: {}", names(b)));
            }
            self.batch = key;
        }
        let counts = format!(
            "{} of {} updated, {} available, {} ready",
            i(st, "/updatedReplicas"),
            i(set, "/spec/replicas"),
            i(st, "/availableReplicas"),
            i(st, "/readyReplicas"),
        );
        if counts != self.counts {
            out.push(format!("  {counts}"));
            self.counts = counts;
        }
        let update = i(st, "/updateRevision");
        let failure = st["lastFailure"]["message"].as_str().unwrap_or_default();
        let state: Option<RolloutState> = serde_json::from_value(st["rolloutState"].clone()).ok();
        let (updated, wanted) = (i(st, "/updatedReplicas"), i(set, "/spec/replicas"));
        match state {
            // As `kubectl rollout status` does for a Deployment: not done
            // while fewer machines than the set wants carry the revision
            // (a set whose pool is still registering claims nothing yet).
            Some(RolloutState::Complete) if updated < wanted => {
                self.note(
                    format!(
                        "Waiting for machines: {updated} of {wanted} on revision {update}{}",
                        short_reason(set)
                    ),
                    out,
                );
                Verdict::Waiting
            }
            Some(RolloutState::Complete) => Verdict::Complete(format!(
                "machineset \"{}\" successfully rolled out: revision {update} on {} machines",
                self.name,
                i(st, "/updatedReplicas")
            )),
            Some(RolloutState::Failed) => {
                let back = match key {
                    Some((rev, _, true)) => format!("; rolling its batch back to revision {rev}"),
                    _ => String::new(),
                };
                Verdict::Failed(format!(
                    "rollout of machineset \"{}\" failed: {failure}{back}",
                    self.name
                ))
            }
            Some(RolloutState::RolledBack) => Verdict::Failed(format!(
                "rollout of machineset \"{}\" failed and its batch was rolled back to revision {}: {failure}",
                self.name,
                i(st, "/currentRevision")
            )),
            Some(RolloutState::Paused) => {
                self.note(
                    format!(
                        "rollout paused (resume with: metalherd rollout resume machineset {})",
                        self.name
                    ),
                    out,
                );
                Verdict::Waiting
            }
            _ => Verdict::Waiting,
        }
    }

    /// A Machine of the set changed (`quiet`: the first listing, not a
    /// change): a line when its phase or revision moved.
    pub fn machine(&mut self, m: &Value, quiet: bool, out: &mut Vec<String>) {
        let name = m["metadata"]["name"].as_str().unwrap_or_default();
        let phase = m["status"]["phase"].as_str().unwrap_or("-");
        let rev = m["metadata"]["labels"][REVISION_LABEL]
            .as_str()
            .unwrap_or("-");
        let now = format!("{phase} (revision {rev})");
        let before = self.phases.insert(name.to_string(), now.clone());
        if !quiet && before.as_deref() != Some(&now) {
            out.push(format!("  machine {name}: {now}"));
        }
    }
}

/// Why the set's status does not describe the rollout wanted now (the
/// revision its template with `class` makes is not its update revision
/// yet), or `None` when it does. A set or class this client cannot read
/// (a newer server's fields) is taken at its status's word.
fn unrecorded(set: &Value, class: Option<&Value>) -> Option<String> {
    let typed: MachineSet = serde_json::from_value(set.clone()).ok()?;
    let spec: Option<MachineClassSpec> = match class {
        Some(c) => Some(serde_json::from_value(c["spec"].clone()).ok()?),
        None => None,
    };
    let target = revision::target(&typed, spec.as_ref());
    if revision::recorded(&typed, &target) {
        return None;
    }
    let name = &typed.spec.template.class_ref.name;
    Some(match target {
        revision::Target::Kept(n) => format!("Waiting for the controller to roll out revision {n}"),
        _ => {
            format!("Waiting for the controller to make the revision of class {name} as it is now")
        }
    })
}

/// The class the set's template names, `None` when it does not exist.
async fn class_of(client: &ApiClient, ns: &str, set: &Value) -> anyhow::Result<Option<Value>> {
    let Some(name) = set
        .pointer("/spec/template/classRef/name")
        .and_then(Value::as_str)
    else {
        return Ok(None);
    };
    match client.get(Kind::MachineClass, ns, name).await {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn class_name(v: &Value) -> Option<&str> {
    v.pointer("/spec/template/classRef/name")
        .and_then(Value::as_str)
}

fn print(out: &mut Vec<String>) {
    for l in out.drain(..) {
        println!("{l}");
    }
}

pub async fn run(g: &GlobalArgs, a: StatusArgs) -> anyhow::Result<()> {
    let t = a.target;
    let kind = set_kind(&t.kind)?;
    let client = ApiClient::from_global(g)?;
    let follow = follow(&client, kind, &t.namespace, &t.name);
    if a.timeout.is_zero() {
        return follow.await;
    }
    match tokio::time::timeout(a.timeout, follow).await {
        Ok(r) => r,
        Err(_) => anyhow::bail!(
            "timed out after {}s waiting for the rollout of machineset \"{}\"",
            a.timeout.as_secs(),
            t.name
        ),
    }
}

async fn follow(client: &ApiClient, kind: Kind, ns: &str, name: &str) -> anyhow::Result<()> {
    let mut tr = Tracker::new(name);
    let mut out = Vec::new();
    let selector = format!("{SET_LABEL}={name}");
    let rv = |v: &Value| {
        v.pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    // A watch that ends (server restart, timeout) is opened again from a
    // fresh read: nothing is missed, since the set's status is whole.
    loop {
        // The class list first: a class edit after it is in its watch.
        let classes = client.list(Kind::MachineClass, Some(ns), None).await?;
        let mut set = client.get(kind, ns, name).await?;
        let mut class = class_of(client, ns, &set).await?;
        let verdict = tr.set(&set, class.as_ref(), &mut out);
        let machines = client
            .list(Kind::Machine, Some(ns), Some(&selector))
            .await?;
        for m in machines["items"].as_array().into_iter().flatten() {
            tr.machine(m, true, &mut out);
        }
        print(&mut out);
        if let Some(end) = verdict.end() {
            return end;
        }
        let sets = client
            .watch(kind, Some(ns), None, rv(&set).as_deref())
            .await?;
        let ms = client
            .watch(
                Kind::Machine,
                Some(ns),
                Some(&selector),
                rv(&machines).as_deref(),
            )
            .await?;
        let cs = client
            .watch(Kind::MachineClass, Some(ns), None, rv(&classes).as_deref())
            .await?;
        let mut all = futures::stream::select(
            futures::stream::select(sets.map(Either::Left), cs.map(Either::Right))
                .map(Either::Left),
            ms.map(Either::Right),
        );
        while let Some(ev) = all.next().await {
            let ev = match ev {
                Either::Right(ev) => {
                    tr.machine(&ev?.object, false, &mut out);
                    print(&mut out);
                    continue;
                }
                Either::Left(ev) => ev,
            };
            match ev {
                Either::Left(ev) => {
                    let ev = ev?;
                    if ev.object["metadata"]["name"].as_str() != Some(name) {
                        continue;
                    }
                    if ev.type_ == "DELETED" {
                        anyhow::bail!("machineset \"{name}\" was deleted");
                    }
                    if class_name(&ev.object) != class_name(&set) {
                        class = class_of(client, ns, &ev.object).await?;
                    }
                    set = ev.object;
                }
                Either::Right(ev) => {
                    let ev = ev?;
                    if ev.object["metadata"]["name"].as_str() != class_name(&set) {
                        continue;
                    }
                    class = (ev.type_ != "DELETED").then_some(ev.object);
                }
            }
            let verdict = tr.set(&set, class.as_ref(), &mut out);
            print(&mut out);
            if let Some(end) = verdict.end() {
                return end;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(gen_: i64, observed: i64, status: Value) -> Value {
        let mut st = status;
        st["observedGeneration"] = json!(observed);
        json!({"metadata": {"name": "w", "generation": gen_}, "spec": {"replicas": 4}, "status": st})
    }

    fn batch(rev: i64, n: i64, names: &[&str], rollback: bool) -> Value {
        let ms: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
        json!({"revision": rev, "number": n, "machines": ms, "rollback": rollback,
               "startedAt": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn follows_batches_and_ends_complete() {
        let mut t = Tracker::new("w");
        let mut out = Vec::new();
        let old = json!({"rolloutState": "Complete", "updateRevision": 1});
        // Not observed yet: the old Complete does not count.
        assert_eq!(t.set(&set(2, 1, old), None, &mut out), Verdict::Waiting);
        assert_eq!(out, ["Waiting for the controller to observe generation 2"]);
        out.clear();
        let b1 = json!({"rolloutState": "Progressing", "updateRevision": 2,
            "currentBatch": batch(2, 1, &["m1", "m2"], false)});
        assert_eq!(
            t.set(&set(2, 2, b1.clone()), None, &mut out),
            Verdict::Waiting
        );
        assert_eq!(out[0], "batch 1 of revision 2 started: m1, m2");
        out.clear();
        // The same state again prints nothing.
        t.set(&set(2, 2, b1), None, &mut out);
        assert!(out.is_empty(), "{out:?}");
        let b2 = json!({"rolloutState": "Progressing", "updateRevision": 2, "updatedReplicas": 2,
            "completedBatches": [batch(2, 1, &["m1", "m2"], false)],
            "currentBatch": batch(2, 2, &["m3", "m4"], false)});
        t.set(&set(2, 2, b2), None, &mut out);
        assert_eq!(
            out,
            [
                "batch 1 of revision 2 passed its gate: m1, m2",
                "batch 2 of revision 2 started: m3, m4",
                "  2 of 4 updated, 0 available, 0 ready",
            ]
        );
        out.clear();
        let done = json!({"rolloutState": "Complete", "updateRevision": 2, "updatedReplicas": 4});
        let v = t.set(&set(2, 2, done), None, &mut out);
        assert_eq!(
            v,
            Verdict::Complete(
                "machineset \"w\" successfully rolled out: revision 2 on 4 machines".into()
            )
        );
    }

    #[test]
    fn complete_with_fewer_machines_than_wanted_is_waited_for() {
        let mut t = Tracker::new("w");
        let mut out = Vec::new();
        // A new set whose pool is still registering: nothing claimed, no
        // batch to run, and yet not rolled out.
        let short = json!({"rolloutState": "Complete", "updateRevision": 1, "updatedReplicas": 0,
            "conditions": [{"type": "PoolSufficient", "status": "False", "reason": "PoolShort",
                            "message": "wanted 4, claimable 0"}]});
        assert_eq!(t.set(&set(1, 1, short), None, &mut out), Verdict::Waiting);
        assert_eq!(
            out.last().map(String::as_str),
            Some("Waiting for machines: 0 of 4 on revision 1 (PoolShort: wanted 4, claimable 0)")
        );
        let done = json!({"rolloutState": "Complete", "updateRevision": 1, "updatedReplicas": 4});
        assert!(matches!(
            t.set(&set(1, 1, done), None, &mut out),
            Verdict::Complete(_)
        ));
    }

    #[test]
    fn a_class_edited_in_place_is_waited_for() {
        use crate::controller::machine_set::plan::{Input, plan, tests::class};
        let mut set: MachineSet = serde_json::from_value(json!({
            "apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": "w", "namespace": "default", "generation": 1},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"role": "worker"}},
                     "template": {"classRef": {"name": "flatcar"}}}
        }))
        .unwrap();
        let class_obj =
            |spec: &MachineClassSpec| json!({"metadata": {"name": "flatcar"}, "spec": spec});
        let (old, new) = (class("4230.2.3"), class("4230.2.4"));
        // What the controller records for each class, as it plans.
        let record = |set: &mut MachineSet, spec: &MachineClassSpec| {
            let p = plan(&Input {
                set,
                claimed: vec![],
                candidates: vec![],
                class: Some(spec),
                now: jiff::Timestamp::UNIX_EPOCH,
            });
            set.status = Some(p.status);
            serde_json::to_value(&*set).unwrap()
        };
        let done1 = record(&mut set, &old);
        assert_eq!(done1["status"]["rolloutState"], "Complete", "{done1:#}");
        let mut t = Tracker::new("w");
        let mut out = Vec::new();
        // The class is edited: the set's status still says revision 1 is
        // complete, at the same generation, and that is not the answer.
        assert_eq!(
            t.set(&done1, Some(&class_obj(&new)), &mut out),
            Verdict::Waiting
        );
        assert_eq!(
            out,
            ["Waiting for the controller to make the revision of class flatcar as it is now"]
        );
        // Once the controller has made revision 2 and rolled it out.
        let done2 = record(&mut set, &new);
        assert_eq!(done2["status"]["updateRevision"], 2, "{done2:#}");
        let Verdict::Complete(msg) = t.set(&done2, Some(&class_obj(&new)), &mut out) else {
            panic!("not complete: {out:?}")
        };
        assert!(msg.contains("revision 2"), "{msg}");
        // The class put back as it was: revision 1 again, which the
        // status does not name yet.
        assert_eq!(
            t.set(&done2, Some(&class_obj(&old)), &mut out),
            Verdict::Waiting
        );
        // No class: nothing new to wait for.
        assert!(matches!(
            t.set(&done2, None, &mut out),
            Verdict::Complete(_)
        ));
    }

    #[test]
    fn a_failure_ends_it_and_says_why() {
        let mut t = Tracker::new("w");
        let mut out = Vec::new();
        let failed = json!({"rolloutState": "Failed", "updateRevision": 2,
            "currentBatch": batch(1, 1, &["m1"], true),
            "lastFailure": {"message": "batch 1 of revision 2 failed: m1: machine went to Error"}});
        let Verdict::Failed(msg) = t.set(&set(1, 1, failed), None, &mut out) else {
            panic!("not failed")
        };
        assert!(msg.contains("m1: machine went to Error"), "{msg}");
        assert!(
            msg.ends_with("rolling its batch back to revision 1"),
            "{msg}"
        );
        assert_eq!(out[0], "rollback batch 1 to revision 1 started: m1");
    }

    #[test]
    fn machine_phases_print_on_change_only() {
        let mut t = Tracker::new("w");
        let mut out = Vec::new();
        let m = |phase: &str, rev: &str| {
            json!({"metadata": {"name": "m1", "labels": {REVISION_LABEL: rev}},
                   "status": {"phase": phase}})
        };
        t.machine(&m("Ready", "1"), true, &mut out);
        t.machine(&m("Ready", "1"), false, &mut out);
        assert!(out.is_empty());
        t.machine(&m("Reimaging", "2"), false, &mut out);
        assert_eq!(out, ["  machine m1: Reimaging (revision 2)"]);
    }

    #[test]
    fn timeouts_parse() {
        assert_eq!(parse_timeout("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_timeout("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_timeout("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_timeout("soon").is_err());
    }
}
