//! Story: a user applies a Machine and its Secret, lists and describes
//! them, watches, and deletes, all through the `metalherd` CLI against a
//! running `metalherd serve`; re-applying keeps what controllers added; the
//! CLI says what to do when the server is not running; SIGTERM stops the
//! server cleanly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::proc::{ChildGuard, wait_for};
use common::server::{Server, text};
use serde_json::{Value, json};

const MACHINE: &str = r#"
apiVersion: v1
kind: Secret
metadata:
  name: rack1-u07-bmc
stringData:
  username: admin
  password: hunter2-secret
---
apiVersion: metalherd.dev/v1alpha1
kind: Machine
metadata:
  name: rack1-u07
  labels:
    rack: rack1
spec:
  bmc:
    address: ipmi://127.0.0.1:9
    credentialsSecretRef:
      name: rack1-u07-bmc
  bootMACAddress: "52:54:00:12:34:07"
  classRef:
    name: flatcar
"#;

fn ok(s: &Server, args: &[&str]) -> String {
    let out = s.cli(args);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "metalherd {args:?} failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        s.log()
    );
    stdout
}

fn header(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split("   ")
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn apply_get_describe_delete_round_trip() {
    let s = Server::start_isolated();
    let file = s.dir.path().join("rack1.yaml");
    std::fs::write(&file, MACHINE).unwrap();
    let f = file.to_str().unwrap();

    assert_eq!(
        ok(&s, &["apply", "-f", f]),
        "secret/rack1-u07-bmc created\nmachine/rack1-u07 created\n"
    );
    assert_eq!(
        ok(&s, &["apply", "-f", f]),
        "secret/rack1-u07-bmc unchanged\nmachine/rack1-u07 unchanged\n"
    );

    // Someone else adds to the machine (a label and a finalizer; not the
    // MachineSet claim label, which the MachineSet controller releases when
    // it names no set); the machine controller running in this server
    // writes status meanwhile.
    let base = "/apis/metalherd.dev/v1alpha1/namespaces/default/machines/rack1-u07";
    let (code, _) = s.http(
        "PATCH",
        base,
        Some(&s.token),
        Some(&json!({"metadata": {"labels": {"example.com/owner": "ops"},
                                  "finalizers": ["metalherd.dev/machine"]}})),
        "application/merge-patch+json",
    );
    assert_eq!(code, 200);
    let (code, ev) = s.req(
        "POST",
        "/api/v1/namespaces/default/events",
        Some(&json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "rack1-u07.power"},
            "involvedObject": {"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
                               "namespace": "default", "name": "rack1-u07"},
            "type": "Normal", "reason": "PoweredOn", "message": "power on for install",
            "count": 2, "firstTimestamp": "2026-01-01T00:00:00Z",
            "lastTimestamp": "2026-01-01T00:00:01Z"})),
    );
    assert_eq!(code, 201, "{ev}");

    // Re-applying the same manifest keeps what others added.
    assert!(ok(&s, &["apply", "-f", f]).contains("machine/rack1-u07 unchanged"));
    // Changing it is "configured", and still keeps the claim.
    let changed = MACHINE.replace("rack: rack1", "rack: rack2");
    std::fs::write(&file, changed).unwrap();
    assert!(ok(&s, &["apply", "-f", f]).contains("machine/rack1-u07 configured"));
    let (_, m) = s.req("GET", base, None);
    assert_eq!(m["metadata"]["labels"]["rack"], "rack2");
    assert_eq!(m["metadata"]["labels"]["example.com/owner"], "ops");
    assert_eq!(
        m["metadata"]["finalizers"],
        json!(["metalherd.dev/machine"])
    );

    // get: tables per kind.
    let t = ok(&s, &["get", "machines"]);
    assert_eq!(
        header(&t),
        ["NAME", "PHASE", "POWER", "NODE", "CLASS", "AGE"]
    );
    let row = t.lines().nth(1).unwrap();
    assert!(
        row.starts_with("rack1-u07 ") && row.contains(" flatcar "),
        "{t}"
    );
    let t = ok(&s, &["get", "machine", "rack1-u07", "-o", "wide"]);
    assert!(
        t.contains("ipmi://127.0.0.1:9") && t.contains("52:54:00:12:34:07"),
        "{t}"
    );
    assert_eq!(ok(&s, &["get", "machines", "-l", "rack=rack1"]), "");
    assert!(ok(&s, &["get", "machines", "-l", "rack=rack2"]).contains("rack1-u07"));
    let t = ok(&s, &["get", "machines", "-A"]);
    assert_eq!(header(&t)[0], "NAMESPACE");
    let t = ok(&s, &["get", "secrets"]);
    assert_eq!(header(&t), ["NAME", "TYPE", "DATA", "AGE"]);
    assert!(
        t.lines().nth(1).unwrap().starts_with("rack1-u07-bmc"),
        "{t}"
    );
    let t = ok(&s, &["get", "events"]);
    assert!(
        t.contains("PoweredOn") && t.contains("machine/rack1-u07"),
        "{t}"
    );

    // -o json is a List with items; -o yaml of one object is that object.
    let list: Value = serde_json::from_str(&ok(&s, &["get", "machines", "-o", "json"])).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["metadata"]["name"], "rack1-u07");
    let one: Value =
        serde_yaml::from_str(&ok(&s, &["get", "m", "rack1-u07", "-o", "yaml"])).unwrap();
    assert_eq!(one["kind"], "Machine");

    // describe: fields, spec, status, events. (Conditions, boot history and
    // last error formatting: see the unit tests of cli::show.)
    let d = ok(&s, &["describe", "machine", "rack1-u07"]);
    for want in [
        "Name:         rack1-u07",
        "Labels:       example.com/owner=ops",
        "Finalizers:   metalherd.dev/machine",
        "address: ipmi://127.0.0.1:9",
        "Spec:",
        "Events:",
        "PoweredOn",
        "power on for install",
    ] {
        assert!(d.contains(want), "describe lacks {want:?}:\n{d}");
    }
    assert!(!d.contains("last-applied"), "{d}");
    let d = ok(&s, &["describe", "secret", "rack1-u07-bmc"]);
    assert!(d.contains("password:  14 bytes"), "{d}");
    assert!(!d.contains("hunter2"), "{d}");

    // delete with a finalizer only marks; removing it deletes.
    let out = ok(&s, &["delete", "machine", "rack1-u07"]);
    assert!(out.contains("marked for deletion"), "{out}");
    let (code, _) = s.http(
        "PATCH",
        base,
        Some(&s.token),
        Some(&json!({"metadata": {"finalizers": null}})),
        "application/merge-patch+json",
    );
    assert!(code == 200 || code == 404);
    let out = s.cli(&["get", "machine", "rack1-u07"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("NotFound"), "{stderr}");
    assert_eq!(
        ok(&s, &["delete", "secret", "rack1-u07-bmc"]),
        "secret \"rack1-u07-bmc\" deleted\n"
    );
    let out = s.cli(&["delete", "secret", "rack1-u07-bmc"]);
    assert!(!out.status.success());
    assert!(text(&out).1.contains("Error from server (NotFound)"));

    // Secret values never reach the server log.
    assert!(!s.log().contains("hunter2"));
}

#[test]
fn get_watch_prints_new_rows() {
    let s = Server::start_isolated();
    let log = s.dir.path().join("watch.out");
    let mut w = ChildGuard::spawn(
        "metalherd get -w",
        s.metalherd()
            .arg("--data-dir")
            .arg(&s.data_dir)
            .args(["get", "machines", "-w"]),
        &log,
    );
    // Give the watch a first object so we know it is listening.
    let file = s.dir.path().join("m.yaml");
    std::fs::write(&file, MACHINE).unwrap();
    ok(&s, &["apply", "-f", file.to_str().unwrap()]);
    let seen = wait_for(Duration::from_secs(20), || {
        let t = std::fs::read_to_string(&log).ok()?;
        t.contains("rack1-u07").then_some(t)
    });
    assert!(
        seen.is_some(),
        "watch printed nothing: {:?}",
        std::fs::read_to_string(&log)
    );
    assert!(w.running());
    w.kill9();
}

#[test]
fn cli_says_how_to_start_the_server_when_it_is_not_running() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let out = Command::new(common::metalherd_bin())
        .args([
            "--server",
            &format!("http://127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir.path())
        .args(["get", "machines"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("Is it running? Start it with: metalherd serve --data-dir"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one clear line: {stderr}");
}

#[test]
fn serve_fails_fast_on_a_used_port_and_stops_cleanly_on_sigterm() {
    let mut s = Server::start_isolated();
    let dir = tempfile::tempdir().unwrap();
    let out = s
        .metalherd()
        .args(["serve", "--listen", &s.addr, "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("port is in use"), "{stderr}");
    // An unwritable data directory (a path below a regular file).
    let f = dir.path().join("file");
    std::fs::write(&f, "").unwrap();
    let out = s
        .metalherd()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(f.join("data"))
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("is not writable"), "{stderr}");
    // SIGTERM: a clean exit, even with a watch open.
    let _watch = ChildGuard::spawn(
        "curl watch",
        s.curl()
            .args(["-s", "-N", "--max-time", "60", "-H"])
            .arg(format!("Authorization: Bearer {}", s.token))
            .arg(format!("{}/api/v1/secrets?watch=true", s.url)),
        &s.dir.path().join("watch.out"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let status = s.guard.terminate(Duration::from_secs(20)).expect("exited");
    assert!(status.success(), "exit {status:?}; log:\n{}", s.log());
    assert!(s.log().contains("metalherd stopped"));
    // Restarted on the same data directory, the old token still works.
    let addr = format!("127.0.0.1:{}", common::free_port());
    let _again = ChildGuard::spawn(
        "metalherd serve again",
        s.metalherd()
            .args(["serve", "--listen", &addr, "--data-dir"])
            .arg(&s.data_dir),
        &s.dir.path().join("serve2.log"),
    );
    let code = wait_for(Duration::from_secs(30), || {
        let out = s
            .curl()
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
            .arg(format!("Authorization: Bearer {}", s.token))
            .arg(format!("https://{addr}/api/v1/secrets"))
            .output()
            .ok()?;
        (out.stdout == b"200").then_some(())
    });
    assert!(code.is_some(), "old token refused after restart");
}
