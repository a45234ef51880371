//! The `debian-coreos` OS (the image deploy/node-image/ builds) against
//! Fedora CoreOS: what its configs differ in.

use crate::common::ignition::{examples, secrets, url_ctx};
use crate::{file, files, json};
use metalherd::ignition::{Stage, render};

#[test]
fn debian_coreos_gets_networkd_its_own_containerd_and_grub_kernel_args() {
    let (_, m, class) = examples().remove(2);
    let node = render(Stage::Node, &m, &class, &secrets(), &url_ctx()).unwrap();
    let net = file(&node, "/etc/systemd/network/10-metalherd.network");
    assert!(net.contains("Address=10.20.0.58/24"), "{net}");
    let paths: Vec<String> = files(&node).into_iter().map(|(p, _)| p).collect();
    assert!(
        !paths.iter().any(|p| p.contains("NetworkManager")),
        "{paths:?}"
    );
    // Ignition 2.14 (Debian's) cannot apply kernelArguments: the installer
    // writes them for GRUB instead.
    assert!(node.kernel_arguments.is_none(), "{}", json(&node));
    let toml = file(&node, "/etc/containerd/config.toml");
    assert!(toml.contains("version = 2"), "{toml}");
    assert!(
        !paths.iter().any(|p| p.contains("containerd.tar.gz")),
        "{paths:?}"
    );
    let kubelet = json(&node);
    assert!(kubelet.contains("/usr/local/bin/kubelet"), "{kubelet}");

    let install = render(Stage::Install, &m, &class, &secrets(), &url_ctx()).unwrap();
    let env = file(&install, "/etc/metalherd/install.env");
    assert!(
        env.contains("KERNEL_ARGS=\"console=ttyS0,115200n8\""),
        "{env}"
    );
    let script = file(&install, "/etc/metalherd/install.sh");
    assert!(
        script.contains("coreos-installer \"${args[@]}\""),
        "{script}"
    );
    assert!(
        script.contains("/boot/grub/metalherd-kargs.cfg"),
        "{script}"
    );
    // Fedora CoreOS keeps kernelArguments in the node config and no grub
    // fragment.
    let (_, m, fcos) = examples().remove(1);
    let install = render(Stage::Install, &m, &fcos, &secrets(), &url_ctx()).unwrap();
    assert!(!file(&install, "/etc/metalherd/install.sh").contains("metalherd-kargs"));
}
