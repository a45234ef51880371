//! Story: `metalherd apply` refuses each bad manifest with its field path,
//! exits non-zero, and the store is unchanged; good documents beside a bad
//! one still apply.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::manifests::{bad_manifests, machine};
use common::server::{Server, text};

fn store_version(s: &Server) -> (String, usize) {
    let mut n = 0;
    let mut rvs = Vec::new();
    for p in ["machines", "machinesets"] {
        let (code, l) = s.req("GET", &format!("/apis/metalherd.dev/v1alpha1/{p}"), None);
        assert_eq!(code, 200);
        n += l["items"].as_array().unwrap().len();
        rvs.push(
            l["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    (rvs.join(","), n)
}

#[test]
fn apply_refuses_each_bad_manifest_with_its_field_path() {
    let s = Server::start();
    for b in bad_manifests() {
        let file = s.dir.path().join(format!(
            "{}.yaml",
            b.doc["metadata"]["name"].as_str().unwrap()
        ));
        std::fs::write(&file, serde_yaml::to_string(&b.doc).unwrap()).unwrap();
        let before = store_version(&s);
        let out = s.cli(&["apply", "-f", file.to_str().unwrap()]);
        let (stdout, stderr) = text(&out);
        assert!(
            !out.status.success(),
            "{}: apply succeeded: {stdout}",
            b.case
        );
        let want = format!("{}: ", b.field);
        let line = stderr
            .lines()
            .find(|l| l.trim_start().starts_with(&want))
            .unwrap_or_else(|| panic!("{}: no line for {}: {stderr}", b.case, b.field));
        assert!(line.contains(b.says), "{}: {line}", b.case);
        assert!(!stdout.contains("created"), "{}: {stdout}", b.case);
        assert_eq!(store_version(&s), before, "{}: store changed", b.case);
    }
}

#[test]
fn a_bad_document_does_not_stop_the_good_ones() {
    let s = Server::start();
    let bad = &bad_manifests()[1];
    let docs = [machine("good-1"), bad.doc.clone(), machine("good-2")]
        .iter()
        .map(|d| serde_yaml::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n");
    let file = s.dir.path().join("mixed.yaml");
    std::fs::write(&file, docs).unwrap();
    let out = s.cli(&["apply", "-f", file.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stdout.contains("machine/good-1 created"), "{stdout}");
    assert!(stdout.contains("machine/good-2 created"), "{stdout}");
    assert!(
        stderr.contains("spec.bmc.address: unsupported scheme \"ftp\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 of 3 documents were not applied"),
        "{stderr}"
    );
    assert_eq!(store_version(&s).1, 2);
}

#[test]
fn the_deliberately_invalid_example_is_refused_and_the_others_apply() {
    let s = Server::start();
    let dir = common::repo_root().join("deploy/examples");
    let out = s.cli(&["apply", "-f", dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    // Only invalid-machine.yaml is refused.
    let refused: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: ") && l.contains(".yaml"))
        .collect();
    assert_eq!(refused.len(), 1, "{stderr}");
    assert!(refused[0].contains("invalid-machine.yaml"), "{stderr}");
    for l in [
        "spec.bmc.address:",
        "spec.bootMACAddress:",
        "spec.network.gateway:",
    ] {
        assert!(stderr.contains(l), "{l} missing: {stderr}");
    }
    for l in [
        "machine/rack1-u07 created",
        "secret/rack1-u07-bmc created",
        "secret/bootstrap-token created",
        "machineset/workers created",
    ] {
        assert!(stdout.contains(l), "{l} missing: {stdout}");
    }
    let (_, m) = s.req(
        "GET",
        "/apis/metalherd.dev/v1alpha1/namespaces/default/machines/rack1-u08",
        None,
    );
    assert_eq!(m["reason"], "NotFound");
}
