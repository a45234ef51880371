//! Story: kubeadm finds every image it runs on a node that reaches no
//! registry. The node image (deploy/node-image/build) carries the pause
//! image and the control-plane images (kube-apiserver,
//! kube-controller-manager, kube-scheduler, kube-proxy, etcd, CoreDNS) as OCI
//! archives built from binaries built from source
//! (scripts/control-plane-images); its `metalherd-images-import.service`
//! imports them into containerd's `k8s.io` namespace. The build leaves the
//! same archives beside the image (`images/`).
//!
//! Here the real containerd (Debian's, as on the node) runs with a root of
//! its own, imports every archive as the node's unit does, and:
//! - holds every reference the real `kubeadm config images list` gives for
//!   the pinned release (so kubeadm's preflight finds them and pulls
//!   nothing);
//! - runs each image's program through runc and sees it name the version
//!   kubeadm expects (the image's layer is unpacked by containerd, not by
//!   this test);
//! - in kube-proxy's image, runs the iptables it calls (nf_tables backend,
//!   as on the node) in the container's own network namespace: a rule with
//!   a match extension is added and read back by iptables-save.
//!
//! The node image's manifest.json names the same references.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::control_plane::{KUBE_VERSION, kube_bin, spawn_kept};

struct Containerd {
    _dir: tempfile::TempDir,
    sock: PathBuf,
    _proc: common::proc::ChildGuard,
}

impl Containerd {
    fn start() -> Containerd {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let sock = d.join("containerd.sock");
        let config = d.join("config.toml");
        // No CRI plugin: nothing here is a kubelet's runtime.
        std::fs::write(
            &config,
            format!(
                "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\n\
                 disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
                 [grpc]\n  address = \"{sock}\"\n\
                 [ttrpc]\n  address = \"{sock}.ttrpc\"\n\
                 [debug]\n  address = \"{debug}\"\n",
                root = d.join("root").display(),
                state = d.join("state").display(),
                sock = sock.display(),
                debug = d.join("debug.sock").display(),
            ),
        )
        .expect("containerd config");
        let mut cmd = Command::new(common::require_tool("containerd"));
        cmd.arg("--config").arg(&config);
        let proc = spawn_kept("containerd", cmd, &d.join("containerd.log"));
        let c = Containerd {
            _dir: dir,
            sock,
            _proc: proc,
        };
        let up = common::proc::wait_for(std::time::Duration::from_secs(60), || {
            c.ctr(&["version"])
                .output()
                .ok()?
                .status
                .success()
                .then_some(())
        });
        assert!(
            up.is_some(),
            "containerd did not answer on {}",
            c.sock.display()
        );
        c
    }

    /// `ctr` against this containerd, in the `k8s.io` namespace (the CRI's),
    /// bounded in time.
    fn ctr(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(common::require_tool("timeout"));
        cmd.arg("180")
            .arg(common::require_tool("ctr"))
            .arg("--address")
            .arg(&self.sock)
            .args(["--namespace", "k8s.io"])
            .args(args);
        cmd
    }

    fn out(&self, args: &[&str]) -> String {
        let out = self.ctr(args).output().expect("ctr");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "ctr {args:?} failed:\n{text}");
        text
    }
}

fn kubeadm_images() -> Vec<String> {
    let out = Command::new(kube_bin("kubeadm"))
        .args([
            "config",
            "images",
            "list",
            "--kubernetes-version",
            KUBE_VERSION,
        ])
        .output()
        .expect("kubeadm");
    assert!(out.status.success(), "kubeadm config images list failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn archives(images: &Path) -> Vec<PathBuf> {
    let mut tars: Vec<PathBuf> = std::fs::read_dir(images)
        .unwrap_or_else(|e| panic!("{}: {e}", images.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tar"))
        .collect();
    tars.sort();
    tars
}

#[test]
fn control_plane_images_without_a_registry() {
    common::require_root();
    let image = common::lab_nodes::node_image();
    let wanted = kubeadm_images();
    assert_eq!(wanted.len(), 7, "kubeadm lists {wanted:?}");

    // The manifest names what kubeadm lists.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(image.join("manifest.json")).expect("manifest.json"))
            .expect("manifest.json is JSON");
    let mut named: Vec<String> = manifest["controlPlaneImages"]
        .as_object()
        .expect("controlPlaneImages in manifest.json")
        .keys()
        .cloned()
        .collect();
    named.extend(
        manifest["pauseImage"]["names"]
            .as_array()
            .expect("pauseImage.names")
            .iter()
            .filter_map(|n| n.as_str().map(str::to_string)),
    );
    for w in &wanted {
        assert!(named.contains(w), "manifest.json lacks {w}: {named:?}");
    }

    let ctrd = Containerd::start();
    let tars = archives(&image.join("images"));
    assert_eq!(tars.len(), 7, "archives: {tars:?}");
    for tar in &tars {
        // As the node's images-import does for everything but pause.
        ctrd.out(&[
            "images",
            "import",
            "--all-platforms",
            "--no-unpack",
            &tar.display().to_string(),
        ]);
    }
    let have = ctrd.out(&["images", "ls", "-q"]);
    let have: Vec<&str> = have.lines().map(str::trim).collect();
    for w in &wanted {
        assert!(have.contains(&w.as_str()), "{w} not imported: {have:?}");
    }

    let find = |part: &str| -> &str {
        wanted
            .iter()
            .find(|w| w.contains(part))
            .unwrap_or_else(|| panic!("kubeadm lists no {part} image"))
    };
    let etcd_tag = find("/etcd:").rsplit(':').next().unwrap_or_default();
    let etcd_version = etcd_tag.split('-').next().unwrap_or_default().to_string();
    let coredns_version = find("coredns")
        .rsplit(":v")
        .next()
        .unwrap_or_default()
        .to_string();
    let runs: Vec<(&str, Vec<&str>, String)> = vec![
        (
            find("kube-apiserver"),
            vec!["/usr/local/bin/kube-apiserver", "--version"],
            format!("Kubernetes {KUBE_VERSION}"),
        ),
        (
            find("kube-controller-manager"),
            vec!["/usr/local/bin/kube-controller-manager", "--version"],
            format!("Kubernetes {KUBE_VERSION}"),
        ),
        (
            find("kube-scheduler"),
            vec!["/usr/local/bin/kube-scheduler", "--version"],
            format!("Kubernetes {KUBE_VERSION}"),
        ),
        (
            find("kube-proxy"),
            vec!["/usr/local/bin/kube-proxy", "--version"],
            format!("Kubernetes {KUBE_VERSION}"),
        ),
        (
            find("/etcd:"),
            vec!["/usr/local/bin/etcd", "--version"],
            format!("etcd Version: {etcd_version}"),
        ),
        (
            find("coredns"),
            vec!["/coredns", "-version"],
            format!("CoreDNS-{coredns_version}"),
        ),
        (find("pause"), vec!["/pause", "-v"], "pause".to_string()),
        (
            find("kube-proxy"),
            vec!["iptables", "--version"],
            "(nf_tables)".to_string(),
        ),
    ];
    for (i, (image_ref, argv, want)) in runs.iter().enumerate() {
        let id = format!("check{i}");
        let mut args = vec!["run", "--rm", "--snapshotter", "native", image_ref, &id];
        args.extend(argv.iter().copied());
        let out = ctrd.out(&args);
        assert!(
            out.contains(want.as_str()),
            "{image_ref} {argv:?} printed {out:?}, not {want:?}"
        );
    }

    // kube-proxy's iptables with the match extensions it loads, committing
    // to the kernel's nf_tables in the container's own network namespace
    // (privileged for CAP_NET_ADMIN there): iptables-restore, as
    // kube-proxy writes its rules.
    let rules = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        rules.path().join("rules"),
        "*nat\n:KUBE-CHECK - [0:0]\n\
         -A KUBE-CHECK -p tcp -m tcp --dport 6443 -m comment --comment metalherd-check -j RETURN\n\
         COMMIT\n",
    )
    .expect("rules");
    let mount = format!(
        "type=bind,src={},dst=/check,options=rbind:ro",
        rules.path().display()
    );
    ctrd.out(&[
        "run",
        "--rm",
        "--privileged",
        "--snapshotter",
        "native",
        "--mount",
        &mount,
        find("kube-proxy"),
        "iptables-restore",
        "iptables-restore",
        "-w",
        "5",
        "--noflush",
        "/check/rules",
    ]);
}
