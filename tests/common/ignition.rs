//! Running the upstream Ignition validator (`ignition-validate`, Debian
//! package `ignition`) over rendered configs. It only *warns* about unknown
//! keys, so any output at all counts as a failure. Also the example
//! Machines and classes of `deploy/examples/` with a render context and
//! secrets, as the rendering story and its benchmark use them.

use std::io::Write;
use std::process::Command;

use metalherd::api::{Machine, MachineClass};
use metalherd::ignition::{NodeConfigSource, RenderContext, RenderSecrets};

/// Validate one config; `Err` carries the validator's output.
pub fn validate(json: &str) -> Result<(), String> {
    let tool = super::require_tool("ignition-validate");
    let mut f = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    f.write_all(json.as_bytes()).map_err(|e| e.to_string())?;
    let out = Command::new(tool)
        .arg(f.path())
        .output()
        .map_err(|e| format!("could not run ignition-validate: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() || !text.trim().is_empty() {
        return Err(format!("ignition-validate ({}): {text}", out.status));
    }
    Ok(())
}

pub const JOIN_TOKEN: &str = "k8sabc.0123456789abcdef";
pub const BOOT_TOKEN: &str = "bt-5f0c2a9e7d1b4c3a";
pub const BOOT_ID: &str = "boot-0001";

pub fn load<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = super::repo_root().join("deploy/examples").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every example pair (name, machine, class).
pub fn examples() -> Vec<(&'static str, Machine, MachineClass)> {
    vec![
        (
            "flatcar",
            load("machine-flatcar.yaml"),
            load("class-flatcar.yaml"),
        ),
        ("fcos", load("machine-fcos.yaml"), load("class-fcos.yaml")),
        ("debian", load("machine-fcos.yaml"), debian_class()),
    ]
}

/// The Fedora CoreOS example as a `debian-coreos` class (the image
/// deploy/node-image/ builds): the OS's own containerd and CNI plugins,
/// kernel arguments through the installer's grub fragment.
pub fn debian_class() -> MachineClass {
    let mut c: MachineClass = load("class-fcos.yaml");
    c.spec.image.os = "debian-coreos".into();
    c.spec.image.version = "12.0".into();
    c.spec.kubernetes.containerd = None;
    c.spec.kubernetes.cni_plugins = None;
    c.spec.container_runtime.version = "1.6.20".into();
    c.spec.units.clear();
    c
}

pub fn ctx(node_config: NodeConfigSource) -> RenderContext {
    RenderContext {
        callhome_base: "http://10.20.0.1:8080".into(),
        boot_token: BOOT_TOKEN.into(),
        boot_id: BOOT_ID.into(),
        mac: None,
        node_config,
    }
}

pub fn url_ctx() -> RenderContext {
    ctx(NodeConfigSource::Url(format!(
        "http://10.20.0.1:8080/ignition/node?mac=52:54:00:a1:07:01&token={BOOT_TOKEN}"
    )))
}

pub fn secrets() -> RenderSecrets {
    RenderSecrets::new(JOIN_TOKEN)
}

/// The real Ignition binary Debian's `ignition` package ships for its
/// initramfs (the same one a booted node runs).
pub const IGNITION: &str = "/usr/lib/dracut/modules.d/30ignition/ignition";

/// Run the real Ignition's `fetch-offline`, `fetch` and `files` stages
/// (what a node runs in its initramfs after the disks stage) with
/// `config`, the `file` platform, into the fresh root `root`. Returns
/// Ignition's log.
///
/// Ignition as Debian builds it relabels what it wrote with SELinux's
/// `setfiles` (policycoreutils) whether or not SELinux is on, and reads
/// the policy type from the root: the root gets SELinux disabled and an
/// empty file-contexts list, so the relabel runs and changes nothing, as
/// on a Debian node.
pub fn apply(config: &str, root: &std::path::Path) -> Result<String, String> {
    let ignition = super::require_tool(IGNITION);
    super::require_tool("setfiles");
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let contexts = root.join("etc/selinux/targeted/contexts/files");
    std::fs::create_dir_all(&contexts).map_err(|e| e.to_string())?;
    std::fs::write(
        root.join("etc/selinux/config"),
        "SELINUX=disabled\nSELINUXTYPE=targeted\n",
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(contexts.join("file_contexts"), "").map_err(|e| e.to_string())?;
    let cfg = work.path().join("config.ign");
    std::fs::write(&cfg, config).map_err(|e| e.to_string())?;
    let mut log = String::new();
    for stage in ["fetch-offline", "fetch", "files"] {
        let out = Command::new(&ignition)
            .env("IGNITION_CONFIG_FILE", &cfg)
            .args(["-platform", "file", "-stage", stage, "-log-to-stdout"])
            .arg("-root")
            .arg(root)
            .arg("-config-cache")
            .arg(work.path().join("cache.json"))
            .arg("-state-file")
            .arg(work.path().join("state"))
            .arg("-neednet")
            .arg(work.path().join("neednet"))
            .args(["-fetch-timeout", "20s"])
            .output()
            .map_err(|e| format!("could not run {IGNITION}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        log.push_str(&text);
        if !out.status.success() {
            return Err(format!(
                "ignition stage {stage} failed ({}):\n{text}",
                out.status
            ));
        }
    }
    Ok(log)
}
