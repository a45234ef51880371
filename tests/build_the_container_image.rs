//! Story: build metalherd's container image here (no registry, no
//! container engine) and run it. `scripts/build-image` packages the
//! binary this test run built as an OCI image layout archive; umoci
//! unpacks it (checking every blob's digest) into a bundle whose config
//! runs `/usr/local/bin/metalherd serve` as user 65532, and the binary runs
//! in the unpacked root filesystem with nothing from the host; a real
//! containerd (started here with its own root, state and socket) imports
//! the archive under the name deploy/kubernetes/deployment.yaml uses,
//! `docker.io/library/metalherd:0.1.0`, and runs it with runc.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::proc::{ChildGuard, wait_for};
use common::server::text;
use serde_json::Value;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    let (o, e) = text(&out);
    assert!(out.status.success(), "{cmd:?}: {o}{e}");
    o
}

#[test]
fn build_the_container_image() {
    common::require_root();
    for t in ["umoci", "containerd", "ctr", "runc", "chroot"] {
        common::require_tool(t);
    }
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("metalherd.oci.tar");
    let version = env!("CARGO_PKG_VERSION");
    run(
        Command::new(common::repo_root().join("scripts/build-image"))
            .arg("--binary")
            .arg(common::metalherd_bin())
            .arg("--out")
            .arg(&archive),
    );

    // umoci: the layout is valid, the blobs match their digests, and the
    // runtime config is the image's.
    let layout = dir.path().join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout));
    let bundle = dir.path().join("bundle");
    run(Command::new(common::require_tool("umoci"))
        .args(["unpack", "--image"])
        .arg(format!("{}:{version}", layout.display()))
        .arg(&bundle));
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(
        config["process"]["args"],
        serde_json::json!(["/usr/local/bin/metalherd", "serve"])
    );
    assert_eq!(config["process"]["user"]["uid"], 65532);
    // The binary runs with only the image's files.
    let out = run(Command::new("chroot")
        .arg(bundle.join("rootfs"))
        .args(["/usr/local/bin/metalherd", "--version"]));
    assert_eq!(out.trim(), format!("metalherd {version}"));

    // containerd imports it under the Deployment's image name and runs it.
    let c = dir.path().join("containerd");
    std::fs::create_dir_all(&c).unwrap();
    let sock = c.join("containerd.sock");
    std::fs::write(
        c.join("config.toml"),
        format!(
            "version = 2\nroot = \"{0}/root\"\nstate = \"{0}/state\"\n[grpc]\n  address = \"{1}\"\n\
             [plugins.\"io.containerd.grpc.v1.cri\"]\n  disable_tcp_service = true\n",
            c.display(),
            sock.display()
        ),
    )
    .unwrap();
    let mut containerd = ChildGuard::spawn(
        "containerd",
        Command::new(common::require_tool("containerd"))
            .arg("--config")
            .arg(c.join("config.toml")),
        &c.join("containerd.log"),
    );
    let ctr = |args: &[&str]| {
        let mut cmd = Command::new(common::require_tool("ctr"));
        cmd.arg("-a").arg(&sock).args(["-n", "k8s.io"]).args(args);
        cmd
    };
    let up = wait_for(Duration::from_secs(30), || {
        ctr(&["version"])
            .output()
            .ok()
            .filter(|o| o.status.success())
    });
    assert!(
        up.is_some(),
        "containerd did not start: {}",
        std::fs::read_to_string(c.join("containerd.log")).unwrap_or_default()
    );
    run(ctr(&["images", "import"]).arg(&archive));
    let name = format!("docker.io/library/metalherd:{version}");
    let images = run(&mut ctr(&["images", "ls", "-q"]));
    assert!(images.lines().any(|l| l == name), "{images}");
    let out = run(&mut ctr(&[
        "run",
        "--rm",
        &name,
        "metalherd-image-check",
        "/usr/local/bin/metalherd",
        "--version",
    ]));
    assert_eq!(out.trim(), format!("metalherd {version}"));
    containerd.terminate(Duration::from_secs(10));
}
