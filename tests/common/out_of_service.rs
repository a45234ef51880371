//! How many of a MachineSet's machines are out of service at once, from the
//! API's watch streams of Machines and MachineSets (never from logs): a
//! machine is out of service while it is not Ready, or while it belongs to
//! the batch in flight and has not passed its gate. The rollout stories of
//! the simulated rack and of the virtual rack feed it the same events, and
//! read the batches `rollout status` printed the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::lab::Lab;

/// The most machines seen out of service at once, and which.
#[derive(Default)]
pub struct OutOfService {
    not_ready: BTreeSet<String>,
    gating: BTreeSet<String>,
    pub peak: usize,
    pub peak_at: Vec<String>,
    /// Watch events taken in.
    pub events: usize,
}

impl OutOfService {
    /// Take in one watch event (`{"type": ..., "object": ...}`) of a Machine
    /// or a MachineSet.
    pub fn observe(&mut self, ev: &Value) {
        let o = &ev["object"];
        if o["kind"] == "Machine" {
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            if o["status"]["phase"] == "Ready" && ev["type"] != "DELETED" {
                self.not_ready.remove(&name);
            } else {
                self.not_ready.insert(name);
            }
        } else if o["kind"] == "MachineSet" {
            let b = &o["status"]["currentBatch"];
            self.gating = b["machines"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["passed"] != true)
                .filter_map(|m| m["name"].as_str().map(str::to_string))
                .collect();
        } else {
            return;
        }
        self.events += 1;
        let out: BTreeSet<&String> = self.not_ready.union(&self.gating).collect();
        if out.len() > self.peak {
            self.peak = out.len();
            self.peak_at = out.into_iter().cloned().collect();
        }
    }

    /// Take in every complete line of `buf` as a watch event, leaving a
    /// partial last line in it.
    pub fn observe_lines(&mut self, buf: &mut Vec<u8>) {
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            if let Ok(ev) = serde_json::from_slice::<Value>(&line) {
                self.observe(&ev);
            }
        }
    }
}

/// The batches of revision `rev` that `rollout status` printed as passed
/// (`batch N of revision R passed its gate: a, b`), by number.
pub fn passed_batches(out: &str, rev: i64) -> BTreeMap<i64, Vec<String>> {
    let mut b = BTreeMap::new();
    for l in out.lines() {
        let Some(rest) = l.strip_prefix("batch ") else {
            continue;
        };
        let Some((n, names)) = rest.split_once(&format!(" of revision {rev} passed its gate: "))
        else {
            continue;
        };
        b.insert(
            n.parse().unwrap(),
            names.split(", ").map(str::to_string).collect(),
        );
    }
    b
}

/// Watches of the virtual rack's Machines and MachineSets (curl inside the
/// rack's namespace, where the API listens), fed to one [`OutOfService`].
/// The curls are killed (by their PIDs) on drop.
pub struct LabWatch {
    pub seen: Arc<Mutex<OutOfService>>,
    curls: Vec<Child>,
}

impl LabWatch {
    pub fn start(lab: &Lab) -> LabWatch {
        let seen = Arc::new(Mutex::new(OutOfService::default()));
        let token = std::fs::read_to_string(lab.run.join("data/api-token")).expect("api token");
        let ca = lab.run.join("data/ca.crt");
        let mut curls = Vec::new();
        for plural in ["machines", "machinesets"] {
            let mut child = Command::new("ip")
                .args(["netns", "exec", &lab.ns, "curl", "-sfN", "--cacert"])
                .arg(&ca)
                .arg("-H")
                .arg(format!("Authorization: Bearer {}", token.trim()))
                .arg(format!(
                    "https://127.0.0.1:7080/apis/metalherd.dev/v1alpha1/namespaces/default/{plural}?watch=true"
                ))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("curl watch");
            let out = child.stdout.take().expect("curl stdout");
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut r = std::io::BufReader::new(out);
                let mut line = Vec::new();
                while r.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
                    seen.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .observe_lines(&mut line);
                }
            });
            curls.push(child);
        }
        LabWatch { seen, curls }
    }

    /// Both watches still streaming (a closed stream would have missed
    /// what came after it).
    pub fn still_open(&mut self) -> bool {
        self.curls
            .iter_mut()
            .all(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for LabWatch {
    fn drop(&mut self) {
        for c in &mut self.curls {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `metalherd rollout status machineset SET --timeout T`, echoed to the
/// test's output: (success, stdout, stderr).
pub fn rollout_status_of(lab: &Lab, set: &str, timeout: &str) -> (bool, String, String) {
    let args = ["rollout", "status", "machineset", set, "--timeout", timeout];
    let o = lab.cli(&args);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    eprintln!("$ metalherd {}\n{out}{err}", args.join(" "));
    (o.status.success(), out, err)
}

/// How many `Installed` steps `after` (a boot history) has that `before`
/// did not.
pub fn new_installs(before: &Value, after: &Value) -> usize {
    let old: Vec<&Value> = before.as_array().into_iter().flatten().collect();
    after
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["step"] == "Installed" && !old.contains(e))
        .count()
}

/// The last 60 lines of metalherd's log, for a failed rollout's message.
pub fn log_tail(lab: &Lab) -> String {
    let log = lab.metalherd_log();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}
