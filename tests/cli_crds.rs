//! Story: the CRDs checked in under deploy/crds/ are exactly what
//! `metalherd crds` prints, so `kubectl apply -f deploy/crds/` installs the
//! objects this binary serves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

#[test]
fn generated_crds_match_deploy_crds() {
    let out = Command::new(common::metalherd_bin())
        .arg("crds")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    let checked_in =
        std::fs::read_to_string(common::repo_root().join("deploy/crds/metalherd.yaml")).unwrap();
    assert!(
        generated == checked_in,
        "deploy/crds/metalherd.yaml is stale: regenerate it with\n  cargo run -q -- crds > deploy/crds/metalherd.yaml"
    );
    // Every kind with its printer columns and subresources is there.
    for kind in ["Machine", "MachineClass", "MachineSet", "DiscoveredMachine"] {
        assert!(
            generated.contains(&format!("kind: {kind}\n")),
            "{kind} missing"
        );
    }
    assert!(generated.contains("scale:"), "MachineSet scale subresource");
    assert!(generated.contains("name: Phase"), "Machine printer columns");
}
