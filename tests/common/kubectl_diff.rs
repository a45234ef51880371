//! The same kubectl command against two API servers: a real kube-apiserver
//! with metalherd's CRDs installed ([`super::control_plane::shared`], with
//! kube-controller-manager, so namespaces are finalized) and a standalone
//! `metalherd serve` ([`Server::start`], controller off). One kubectl binary
//! (the system's, which the kubectl suites target) runs against both, each
//! with its own kubeconfig and cache, in a directory holding the test's
//! manifests, so a command reads the same on both (`apply -f lease.yaml`).
//!
//! Each run becomes a transcript: exit code, stdout, stderr, with what two
//! servers legitimately differ in masked ([`mask`]): ages, resourceVersions,
//! uids, timestamps, server addresses, kubectl's temp file names, column
//! padding. Transcripts must be equal, unless the command is a row of the
//! test's table of known differences; such a row must still hold (both
//! transcripts differ, each shows what the row says it shows), and every
//! row must be met by the end ([`Diff::finish`]), so the table stays true.
//! `METALHERD_KUBECTL_DIFF_SHOW=1` prints every pair of transcripts.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use super::control_plane::{ControlPlane, shared};
use super::kubectl::{kubeconfig, kubectl_cmd};
use super::proc::{ChildGuard, wait_for};
use super::server::{Server, text};

/// One known difference: kubectl's command line as the test writes it, a
/// part of kube-apiserver's transcript and a part of metalherd's that the
/// other lacks (an empty part: only the other side's part is checked).
pub struct Known {
    pub command: &'static str,
    pub kube: &'static str,
    pub metalherd: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Kube,
    Metalherd,
}

pub const BOTH: [Side; 2] = [Side::Kube, Side::Metalherd];

pub struct Diff {
    pub cp: Arc<ControlPlane>,
    pub s: Server,
    /// kubectl's working directory: the manifests and editor scripts.
    pub files: tempfile::TempDir,
    kube_kc: PathBuf,
    metalherd_kc: PathBuf,
    known: &'static [Known],
    met: RefCell<BTreeSet<&'static str>>,
    equal: RefCell<usize>,
    failures: RefCell<Vec<String>>,
}

impl Diff {
    pub fn new(known: &'static [Known]) -> Diff {
        super::kubectl::require_recent_kubectl();
        let cp = shared();
        let s = Server::start();
        let metalherd_kc = kubeconfig(&s);
        let kube_kc = cp.admin_kubeconfig();
        Diff {
            cp,
            s,
            files: tempfile::tempdir().expect("tempdir"),
            kube_kc,
            metalherd_kc,
            known,
            met: RefCell::default(),
            equal: RefCell::default(),
            failures: RefCell::default(),
        }
    }

    /// Write a manifest (or script) kubectl finds by `name`.
    pub fn file(&self, name: &str, text: &str) {
        std::fs::write(self.files.path().join(name), text).expect("write file");
    }

    /// An executable script `name` running `body` with the file to edit
    /// as `$1`: an EDITOR for `kubectl edit`.
    pub fn editor(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.files.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\nset -e\n{body}\n")).expect("editor");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    fn kubeconfig(&self, side: Side) -> &Path {
        match side {
            Side::Kube => &self.kube_kc,
            Side::Metalherd => &self.metalherd_kc,
        }
    }

    /// kubectl with the arguments of `line` ([`words`]) against one side,
    /// in the manifests' directory.
    pub fn cmd(&self, side: Side, line: &str) -> Command {
        let mut c = kubectl_cmd(self.kubeconfig(side));
        c.current_dir(self.files.path())
            .env_remove("KUBE_EDITOR")
            .env_remove("EDITOR")
            .args(words(line));
        c
    }

    /// Run on one side only (setup that differs, cleanup); must succeed.
    pub fn on(&self, side: Side, line: &str) -> String {
        let out = self.cmd(side, line).output().expect("run kubectl");
        let (o, e) = text(&out);
        assert!(out.status.success(), "kubectl {line} on {side:?}: {e}{o}");
        o
    }

    /// Run `kubectl LINE` on both and compare.
    pub fn check(&self, line: &str) {
        self.check_env(line, &[]);
    }

    /// [`Diff::check`] with environment variables set (EDITOR).
    pub fn check_env(&self, line: &str, env: &[(&str, &Path)]) {
        let runs = BOTH.map(|side| {
            let mut c = self.cmd(side, line);
            for (k, v) in env {
                c.env(k, v);
            }
            let out = c.output().expect("run kubectl");
            let (o, e) = text(&out);
            transcript(out.status.code(), &o, &e)
        });
        self.compare(line, &runs[0], &runs[1]);
    }

    /// [`Diff::check`] of a command whose output's order depends on when,
    /// to the second, things happened (managedFields are ordered by time):
    /// the words of stdout are compared as a sorted list.
    pub fn check_unordered(&self, line: &str) {
        let runs = BOTH.map(|side| {
            let out = self.cmd(side, line).output().expect("run kubectl");
            let (o, e) = text(&out);
            let mut words: Vec<&str> = o.split_whitespace().collect();
            words.sort_unstable();
            transcript(out.status.code(), &words.join(" "), &e)
        });
        self.compare(line, &runs[0], &runs[1]);
    }

    /// [`Diff::check`] of a `--raw` command, whose stdout is JSON (one
    /// document, or one per line as a watch prints): compared as JSON, so
    /// the order of keys does not count, and without `managedFields`
    /// (tested as kubectl shows them elsewhere) or the value of a
    /// `continue` token (each server encodes its own).
    pub fn check_json(&self, line: &str) {
        let runs = BOTH.map(|side| {
            let out = self.cmd(side, line).output().expect("run kubectl");
            let (o, e) = text(&out);
            let docs: Vec<String> = o
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| match serde_json::from_str::<serde_json::Value>(l) {
                    Ok(v) => canonical(&v),
                    Err(_) => l.to_string(),
                })
                .collect();
            transcript(out.status.code(), &docs.join("\n"), &e)
        });
        self.compare(line, &runs[0], &runs[1]);
    }

    /// `kubectl get -w` (or any command that runs until stopped) on each
    /// side in turn: once its stdout has `before` lines, run `change` on
    /// the same side, wait for `after` lines, stop it, and compare what it
    /// printed.
    pub fn watch(&self, line: &str, change: &str, before: usize, after: usize) {
        let runs = BOTH.map(|side| {
            let out = self.files.path().join("watch.out");
            let err = self.files.path().join("watch.err");
            let mut child = self.spawn(side, line, &out, &err);
            let lines = |n: usize| {
                let t = std::fs::read_to_string(&out).unwrap_or_default();
                (t.lines().count() >= n).then_some(())
            };
            let seen = wait_for(Duration::from_secs(30), || lines(before));
            assert!(seen.is_some(), "{side:?}: {}", read(&out) + &read(&err));
            // All it prints before the change, and no more.
            std::thread::sleep(Duration::from_millis(500));
            assert!(
                lines(before + 1).is_none(),
                "kubectl {line} on {side:?} printed more than {before} lines before the change:\n{}",
                read(&out)
            );
            self.on(side, change);
            let seen = wait_for(Duration::from_secs(30), || lines(after));
            assert!(seen.is_some(), "{side:?}: {}", read(&out) + &read(&err));
            child.kill9();
            transcript(None, &read(&out), &read(&err))
        });
        self.compare(line, &runs[0], &runs[1]);
    }

    /// `kubectl wait` (or any command that blocks until a change) on each
    /// side in turn: it must still run after a moment, then `change` on the
    /// same side lets it end; compare what it printed and how it ended.
    pub fn blocked_until(&self, line: &str, change: &str) {
        let runs = BOTH.map(|side| {
            let out = self.files.path().join("wait.out");
            let err = self.files.path().join("wait.err");
            let mut child = self.spawn(side, line, &out, &err);
            std::thread::sleep(Duration::from_millis(1500));
            assert!(child.running(), "{side:?} returned early: {}", read(&err));
            self.on(side, change);
            let ended = wait_for(Duration::from_secs(30), || (!child.running()).then_some(()));
            assert!(ended.is_some(), "kubectl {line} on {side:?} did not end");
            let status = child.child.take().and_then(|mut c| c.wait().ok());
            transcript(status.and_then(|s| s.code()), &read(&out), &read(&err))
        });
        self.compare(line, &runs[0], &runs[1]);
    }

    fn spawn(&self, side: Side, line: &str, out: &Path, err: &Path) -> ChildGuard {
        let mut c = self.cmd(side, line);
        c.stdin(Stdio::null())
            .stdout(std::fs::File::create(out).expect("out file"))
            .stderr(std::fs::File::create(err).expect("err file"));
        ChildGuard {
            name: format!("kubectl {line}"),
            child: Some(c.spawn().expect("start kubectl")),
        }
    }

    /// Compare two transcripts; a failure is reported at once (stderr)
    /// and counted, and the test goes on, so one run shows them all.
    fn compare(&self, line: &str, kube: &str, metalherd: &str) {
        let command = format!("kubectl {line}");
        let (kube, metalherd) = (self.mask(kube), self.mask(metalherd));
        let shown = format!("===== kube-apiserver\n{kube}\n===== metalherd\n{metalherd}\n=====");
        if std::env::var_os("METALHERD_KUBECTL_DIFF_SHOW").is_some() {
            eprintln!("{command}\n{shown}");
        }
        let failure = match self.known.iter().find(|k| k.command == command) {
            None if kube == metalherd => {
                *self.equal.borrow_mut() += 1;
                return;
            }
            None => "kube-apiserver and metalherd differ (not a known difference)".to_string(),
            Some(k) => {
                self.met.borrow_mut().insert(k.command);
                let shows = |t: &str, part: &str, not: &str| {
                    t.contains(part) && (not.is_empty() || !t.contains(not))
                };
                if kube == metalherd {
                    "a known difference is gone: take it out of the table".to_string()
                } else if !shows(&kube, k.kube, k.metalherd) {
                    format!(
                        "kube-apiserver no longer prints what the table says: {:?}",
                        k.kube
                    )
                } else if !shows(&metalherd, k.metalherd, k.kube) {
                    format!(
                        "metalherd no longer prints what the table says: {:?}",
                        k.metalherd
                    )
                } else {
                    return;
                }
            }
        };
        let failure = format!("{command}: {failure}\n{shown}");
        eprintln!("{failure}");
        self.failures.borrow_mut().push(failure);
    }

    /// No comparison failed and every row of the table was met; returns
    /// how many commands printed the same on both.
    pub fn finish(&self) -> usize {
        let met = self.met.borrow();
        let unmet: Vec<&str> = self
            .known
            .iter()
            .map(|k| k.command)
            .filter(|c| !met.contains(c))
            .collect();
        let failures = self.failures.borrow();
        assert!(
            failures.is_empty() && unmet.is_empty(),
            "{} comparisons failed:\n{}\nrows of the table never run: {unmet:#?}",
            failures.len(),
            failures.join("\n")
        );
        *self.equal.borrow()
    }

    /// What legitimately differs between the two servers, masked.
    pub fn mask(&self, t: &str) -> String {
        let mut t = t.to_string();
        for url in [&self.cp.url, &self.s.url] {
            t = t.replace(url.as_str(), "https://SERVER");
            if let Some(host) = url.strip_prefix("https://") {
                t = t.replace(host, "SERVER");
            }
        }
        resource_version(&t)
            .lines()
            // kube-apiserver's own warning Events about its `kubernetes`
            // Service (now and then a startup repair of its cluster IP)
            // are about nothing the test made.
            .filter(|line| !(line.contains("Warning") && line.contains("service/kubernetes")))
            .map(|line| {
                let body = line.trim_start();
                let indent = &line[..line.len() - body.len()];
                let words: Vec<String> = body.split_whitespace().map(word).collect();
                format!("{indent}{}", words.join(" "))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The words of a command line: split at spaces, except inside single
/// quotes, which go (`-p '{"spec": {}}'` is two words), as a shell does.
pub fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                word.get_or_insert_with(String::new);
            }
            c if c.is_whitespace() && !quoted => out.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    assert!(!quoted, "unbalanced quote in {line:?}");
    out.extend(word);
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn transcript(code: Option<i32>, out: &str, err: &str) -> String {
    let code = code.map_or("stopped".to_string(), |c| c.to_string());
    format!("exit {code}\n--- stdout\n{out}\n--- stderr\n{err}")
}

/// One word of output, masked: an age (`45s`, `3m12s`), and inside it any
/// uid, timestamp or kubectl temp file number.
fn word(w: &str) -> String {
    if is_age(w) {
        return "AGE".into();
    }
    let w = replace_all(w, uuid_len, "UID");
    let w = replace_all(&w, timestamp_len, "TIME");
    replace_all(&w, temp_file_len, "kubectl-edit-N")
}

/// `45s`, `3m12s`, `2d3h`: kubectl's short durations.
fn is_age(w: &str) -> bool {
    let mut digits = 0;
    let mut units = 0;
    for c in w.chars() {
        match c {
            '0'..='9' => digits += 1,
            's' | 'm' | 'h' | 'd' | 'y' if digits > 0 => {
                digits = 0;
                units += 1;
            }
            _ => return false,
        }
    }
    units > 0 && digits == 0
}

/// Replace every match of `len` (the length of a match starting there).
fn replace_all(s: &str, len: impl Fn(&[u8]) -> Option<usize>, with: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        match len(&b[i..]) {
            Some(n) => {
                out.push_str(with);
                i += n;
            }
            None => {
                let c = s[i..].chars().next().unwrap_or(' ');
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

/// Bytes matching a shape: `h` a hex digit, `d` a decimal one, anything
/// else itself.
fn shaped(b: &[u8], shape: &str) -> bool {
    b.len() >= shape.len()
        && shape.bytes().zip(b).all(|(s, c)| match s {
            b'h' => c.is_ascii_hexdigit(),
            b'd' => c.is_ascii_digit(),
            _ => s == *c,
        })
}

fn uuid_len(b: &[u8]) -> Option<usize> {
    const UUID: &str = "hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh";
    shaped(b, UUID).then_some(UUID.len())
}

fn timestamp_len(b: &[u8]) -> Option<usize> {
    const TIME: &str = "dddd-dd-ddTdd:dd:dd";
    if !shaped(b, TIME) {
        return None;
    }
    let mut n = TIME.len();
    if b.get(n) == Some(&b'.') {
        n += 1 + b[n + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
    }
    (b.get(n) == Some(&b'Z')).then_some(n + 1)
}

fn temp_file_len(b: &[u8]) -> Option<usize> {
    let rest = b.strip_prefix(b"kubectl-edit-")?;
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    (digits > 0).then_some("kubectl-edit-".len() + digits)
}

/// The digits after `resourceVersion` (`resourceVersion: "12"`,
/// `"resourceVersion":"12"`, describe's `Resource Version:  12`) become
/// `RV`.
fn resource_version(w: &str) -> String {
    let Some((i, key)) = ["resourceVersion", "Resource Version"]
        .into_iter()
        .filter_map(|k| Some((w.find(k)?, k)))
        .min()
    else {
        return w.to_string();
    };
    let after = i + key.len();
    let rest = &w[after..];
    let skip = rest.len() - rest.trim_start_matches(['"', ':', ' ', '\\']).len();
    let digits = rest[skip..].bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return format!("{}{}", &w[..after], resource_version(rest));
    }
    format!(
        "{}{}RV{}",
        &w[..after],
        &rest[..skip],
        resource_version(&rest[skip + digits..])
    )
}

/// JSON with sorted keys, without `managedFields`, and `continue` tokens
/// as `TOKEN`.
fn canonical(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> =
                m.keys().filter(|k| k.as_str() != "managedFields").collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    let val = match (k.as_str(), &m[k]) {
                        ("continue", Value::String(_)) => "\"TOKEN\"".to_string(),
                        (_, v) => canonical(v),
                    };
                    format!("{k:?}:{val}")
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}
