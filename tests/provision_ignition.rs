//! Story "provision it": every example MachineClass renders install, node
//! and wipe Ignition configs that the upstream validator accepts and that
//! the real Ignition binary applies (its fetch and files stages, into a
//! directory standing for the node's root), the
//! configs are snapshotted, the join token stays inside the config only,
//! the operation decides which partitions survive (an install keeps the
//! class's preserved ones, a wipe none), and bad classes are refused with
//! their field named.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::ignition::{BOOT_TOKEN, JOIN_TOKEN, ctx, examples, load, secrets, url_ctx};
use metalherd::api::MachineClass;
use metalherd::ignition::{
    self, Config, NodeConfigSource, RenderSecrets, Stage, redacted, render, to_json,
};
use serde_json::Value;

#[path = "provision_ignition/wipe.rs"]
mod wipe;

#[path = "provision_ignition/debian.rs"]
mod debian;

#[path = "provision_ignition/real_ignition.rs"]
mod real_ignition;

fn json(c: &Config) -> String {
    to_json(c).unwrap()
}

/// The files a config writes, decoded, by path.
fn files(c: &Config) -> Vec<(String, String)> {
    c.storage
        .iter()
        .flat_map(|s| s.files.iter())
        .filter_map(|f| {
            let src = f.contents.as_ref()?.source.as_ref()?;
            let bytes = ignition::spec::decode_data_url(src)?;
            Some((f.path.clone(), String::from_utf8(bytes).unwrap()))
        })
        .collect()
}

fn file(c: &Config, path: &str) -> String {
    files(c)
        .into_iter()
        .find(|(p, _)| p == path)
        .unwrap_or_else(|| panic!("no file {path}"))
        .1
}

#[test]
fn every_example_renders_configs_ignition_validate_accepts() {
    for (name, m, class) in examples() {
        for (label, stage, c) in [
            ("install/url", Stage::Install, url_ctx()),
            (
                "install/embed",
                Stage::Install,
                ctx(NodeConfigSource::Embed),
            ),
            ("node", Stage::Node, url_ctx()),
            ("wipe", Stage::Wipe, url_ctx()),
        ] {
            let cfg = render(stage, &m, &class, &secrets(), &c)
                .unwrap_or_else(|e| panic!("{name} {label}: {e}"));
            common::ignition::validate(&json(&cfg))
                .unwrap_or_else(|e| panic!("{name} {label}: {e}"));
            // The redacted view is still a valid config.
            common::ignition::validate(&json(&redacted(&cfg, &secrets(), &c)))
                .unwrap_or_else(|e| panic!("{name} {label} redacted: {e}"));
        }
    }
}

#[test]
fn the_validator_check_can_fail() {
    let (_, m, class) = examples().remove(0);
    let cfg = render(Stage::Node, &m, &class, &secrets(), &url_ctx()).unwrap();
    let mut v: Value = serde_json::to_value(&cfg).unwrap();
    // An unknown key: the validator only warns, which we count as failure.
    v["storage"]["files"][0]["contnets"] = Value::from("x");
    let e = common::ignition::validate(&v.to_string()).unwrap_err();
    assert!(e.contains("contnets"), "{e}");
    // A real error: a relative path.
    let mut v: Value = serde_json::to_value(&cfg).unwrap();
    v["storage"]["files"][0]["path"] = Value::from("etc/hostname");
    assert!(common::ignition::validate(&v.to_string()).is_err());
    // An unsupported version.
    assert!(common::ignition::validate(r#"{"ignition":{"version":"3.9.0"}}"#).is_err());
}

#[test]
fn embedded_node_config_is_the_node_config() {
    for (name, m, class) in examples() {
        let install = render(
            Stage::Install,
            &m,
            &class,
            &secrets(),
            &ctx(NodeConfigSource::Embed),
        )
        .unwrap();
        let node = render(
            Stage::Node,
            &m,
            &class,
            &secrets(),
            &ctx(NodeConfigSource::Embed),
        )
        .unwrap();
        assert_eq!(
            file(&install, "/etc/metalherd/node.ign"),
            json(&node),
            "{name}"
        );
    }
}

#[test]
fn rendered_scripts_parse_as_bash() {
    let bash = common::require_tool("bash");
    for (name, m, class) in examples() {
        let install = render(Stage::Install, &m, &class, &secrets(), &url_ctx()).unwrap();
        let wipe = render(Stage::Wipe, &m, &class, &secrets(), &url_ctx()).unwrap();
        for (cfg, path) in [
            (&install, "/etc/metalherd/install.sh"),
            (&install, "/etc/metalherd/callhome.sh"),
            (&wipe, "/etc/metalherd/wipe.sh"),
            (&wipe, "/etc/metalherd/callhome.sh"),
        ] {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            f.write_all(file(cfg, path).as_bytes()).unwrap();
            let out = std::process::Command::new(&bash)
                .arg("-n")
                .arg(f.path())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name} {path}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn node_config_carries_the_join_and_the_machine() {
    let (_, m, class) = examples().remove(1);
    let node = render(Stage::Node, &m, &class, &secrets(), &url_ctx()).unwrap();
    let join = file(&node, "/etc/metalherd/kubeadm-join.yaml");
    assert!(
        join.contains("apiVersion: kubeadm.k8s.io/v1beta4"),
        "{join}"
    );
    assert!(join.contains(&format!("token: \"{JOIN_TOKEN}\"")), "{join}");
    assert!(
        join.contains("value: \"metalherd://default/rack1-u08\""),
        "{join}"
    );
    assert!(join.contains("effect: \"NoSchedule\""), "{join}");
    let env = file(&node, "/etc/metalherd/callhome.env");
    assert!(env.contains("METALHERD_MAC=\"52:54:00:a1:08:01\""), "{env}");
    assert_eq!(file(&node, "/etc/hostname"), "rack1-u08\n");
}

/// The config with data URLs decoded below it, for reviewable snapshots.
fn readable(c: &Config) -> String {
    fn walk(v: &mut Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if s.starts_with("data:") => {
                let bytes = ignition::spec::decode_data_url(s).unwrap();
                out.push(String::from_utf8(bytes).unwrap());
                *s = format!("data:… [{}]", out.len());
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values_mut().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(c).unwrap();
    let mut decoded = Vec::new();
    walk(&mut v, &mut decoded);
    let mut s = serde_json::to_string_pretty(&v).unwrap();
    for (i, d) in decoded.iter().enumerate() {
        s.push_str(&format!("\n\n----- [{}] -----\n{d}", i + 1));
    }
    s
}

#[test]
fn snapshots() {
    for (name, m, class) in examples() {
        for stage in [Stage::Install, Stage::Node, Stage::Wipe] {
            let cfg = render(stage, &m, &class, &secrets(), &url_ctx()).unwrap();
            insta::assert_snapshot!(format!("{name}-{}", stage.as_str()), readable(&cfg));
        }
    }
}

/// A tracing writer into a shared buffer.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

#[test]
fn join_token_appears_only_in_the_config() {
    // Process-wide: a scoped subscriber lost events to the callsite interest
    // other test threads cached. Their renders are captured (and checked) too.
    let cap = Capture::default();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(cap.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(sub).expect("the only global subscriber");
    let mut errors = Vec::new();
    {
        for (_, m, class) in examples() {
            for stage in [Stage::Install, Stage::Node] {
                let c = ctx(NodeConfigSource::Embed);
                let cfg = render(stage, &m, &class, &secrets(), &c).unwrap();
                // In the config: yes (the node needs it).
                assert!(json(&cfg).contains(JOIN_TOKEN));
                // In the redacted view: no, nor the per-boot token.
                let r = json(&redacted(&cfg, &secrets(), &c));
                assert!(!r.contains(JOIN_TOKEN) && !r.contains(BOOT_TOKEN));
                assert!(r.contains("%3Credacted%3E"));
                // Errors, with the token present in the inputs.
                let mut bad = class.clone();
                bad.spec.ignition_fragments = vec![metalherd::api::IgnitionFragment {
                    inline: Some("{not json".into()),
                    source: None,
                }];
                if let Err(e) = render(stage, &m, &bad, &secrets(), &c) {
                    errors.push(format!("{e} {e:?}"));
                }
                let mut bad = class.clone();
                bad.spec.node_taints.push(Default::default());
                if let Err(e) = render(stage, &m, &bad, &secrets(), &c) {
                    errors.push(format!("{e} {e:?}"));
                }
            }
        }
        // A malformed token is refused without being echoed.
        let (_, m, class) = examples().remove(0);
        let leaky = RenderSecrets::new("NOT A TOKEN zq9x");
        let e = render(Stage::Node, &m, &class, &leaky, &url_ctx()).unwrap_err();
        assert_eq!(e.field(), Some("spec.join.tokenSecretRef"));
        assert!(!format!("{e} {e:?}").contains("zq9x"));
    }
    assert!(!errors.is_empty());
    for e in &errors {
        assert!(!e.contains(JOIN_TOKEN) && !e.contains(BOOT_TOKEN), "{e}");
    }
    // Debug of the inputs.
    let dbg = format!("{:?} {:?}", secrets(), url_ctx());
    assert!(
        !dbg.contains(JOIN_TOKEN) && !dbg.contains(BOOT_TOKEN),
        "{dbg}"
    );
    // Logs.
    let logs = String::from_utf8(cap.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("rendered") && logs.contains("refused"),
        "{logs}"
    );
    assert!(
        !logs.contains(JOIN_TOKEN) && !logs.contains(BOOT_TOKEN),
        "{logs}"
    );
}

fn refused(mutate: impl Fn(&mut MachineClass)) -> ignition::RenderError {
    let (_, m, mut class) = examples().remove(1);
    mutate(&mut class);
    render(Stage::Node, &m, &class, &secrets(), &url_ctx()).unwrap_err()
}

#[test]
fn bad_classes_are_refused_with_their_field() {
    let e = refused(|c| c.spec.container_runtime.name = "cri-o".into());
    assert_eq!(e.field(), Some("spec.containerRuntime.name"), "{e}");
    assert!(
        e.to_string()
            .contains("unknown container runtime \"cri-o\""),
        "{e}"
    );

    let e = refused(|c| c.spec.kubernetes.version = "v1.33.x".into());
    assert_eq!(e.field(), Some("spec.kubernetes.version"), "{e}");
    assert!(e.to_string().contains("malformed version"), "{e}");

    let e = refused(|c| c.spec.container_runtime.version = "latest".into());
    assert_eq!(e.field(), Some("spec.containerRuntime.version"), "{e}");

    let e = refused(|c| {
        c.spec.ignition_fragments = vec![metalherd::api::IgnitionFragment {
            inline: Some(r#"{"ignition": {"version": "3.3.0"}"#.into()),
            source: None,
        }]
    });
    assert_eq!(e.field(), Some("spec.ignitionFragments[0].inline"), "{e}");
    assert!(e.to_string().contains("does not parse"), "{e}");

    // A missing Secret, and a Secret without the key.
    let (_, _, class) = examples().remove(0);
    let e = RenderSecrets::from_secret(&class, None).unwrap_err();
    assert_eq!(e.field(), Some("spec.join.tokenSecretRef"));
    assert_eq!(
        e.to_string(),
        "spec.join.tokenSecretRef: Secret \"join-token\" not found"
    );
    let empty = k8s_openapi::api::core::v1::Secret::default();
    let e = RenderSecrets::from_secret(&class, Some(&empty)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "spec.join.tokenSecretRef: Secret \"join-token\" has no key \"token\""
    );
    let s = k8s_openapi::api::core::v1::Secret {
        data: Some(
            [(
                "token".to_string(),
                k8s_openapi::ByteString(JOIN_TOKEN.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    assert_eq!(
        RenderSecrets::from_secret(&class, Some(&s)).unwrap(),
        secrets()
    );

    // Values that would inject lines are refused, not rendered.
    let e = refused(|c| c.spec.kernel_args.push("quiet\nExecStart=/bin/sh".into()));
    assert_eq!(e.field(), Some("spec.kernelArgs[1]"), "{e}");
    let e = refused(|c| c.spec.join.api_server_endpoint = "10.0.0.1:6443\"\n  x: y".into());
    assert_eq!(e.field(), Some("spec.join.apiServerEndpoint"), "{e}");
    let e = refused(|c| {
        c.spec
            .node_labels
            .insert("a".into(), "b\nc".into())
            .map(|_| ())
            .unwrap_or(())
    });
    assert_eq!(e.field(), Some("spec.nodeLabels[\"a\"]"), "{e}");
}

#[test]
fn examples_pass_manifest_validation() {
    use metalherd::api::{Kind, validate::validate};
    for (kind, file) in [
        (Kind::MachineClass, "class-flatcar.yaml"),
        (Kind::MachineClass, "class-fcos.yaml"),
        (Kind::Machine, "machine-flatcar.yaml"),
        (Kind::Machine, "machine-fcos.yaml"),
    ] {
        let v: Value = load(file);
        validate(kind, &v).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

#[test]
fn cli_prints_configs_redacted_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("join-token.yaml");
    std::fs::write(
        &secret,
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: join-token\n  namespace: default\nstringData:\n  token: {JOIN_TOKEN}\n"
        ),
    )
    .unwrap();
    let ex = common::repo_root().join("deploy/examples");
    let run = |extra: &[&str], with_secret: bool| {
        let mut cmd = std::process::Command::new(common::metalherd_bin());
        cmd.args(["render", "ignition", "rack1-u08"])
            .args(extra)
            .arg("-f")
            .arg(ex.join("machine-fcos.yaml"))
            .arg("-f")
            .arg(ex.join("class-fcos.yaml"));
        if with_secret {
            cmd.arg("-f").arg(&secret);
        }
        cmd.output().unwrap()
    };
    for stage in ["install", "node"] {
        let out = run(&["--stage", stage], true);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(!text.contains(JOIN_TOKEN), "{stage}");
        common::ignition::validate(&text).unwrap_or_else(|e| panic!("{stage}: {e}"));
        let out = run(&["--stage", stage, "--show-secrets"], true);
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(JOIN_TOKEN), "{stage}");
        common::ignition::validate(&text).unwrap_or_else(|e| panic!("{stage}: {e}"));
    }
    let out = run(&["--stage", "wipe", "--show-secrets"], true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("metalherd-wipe.service"), "{text}");
    assert!(
        !text.contains(JOIN_TOKEN),
        "the wipe config carries no join token"
    );
    common::ignition::validate(&text).unwrap_or_else(|e| panic!("wipe: {e}"));
    let out = run(&[], false);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.join.tokenSecretRef: Secret \"join-token\" not found"),
        "{err}"
    );
}

#[test]
fn typed_storage_entries_pass_the_validator() {
    use metalherd::ignition::spec::{
        Directory, Disk, Filesystem, IgnitionConfig, Partition, Resource,
    };
    let mut c = Config::new();
    let s = c.storage_mut();
    s.disks.push(Disk {
        device: "/dev/disk/by-id/wwn-0x5000c500a0b1c2d3".into(),
        wipe_table: Some(false),
        partitions: vec![Partition {
            label: Some("data".into()),
            number: Some(10),
            size_mib: Some(0),
            start_mib: Some(0),
            should_exist: Some(true),
            wipe_partition_entry: Some(false),
            ..Partition::default()
        }],
    });
    s.filesystems.push(Filesystem {
        device: "/dev/disk/by-partlabel/data".into(),
        format: Some("xfs".into()),
        path: Some("/var/lib/data".into()),
        label: Some("data".into()),
        wipe_filesystem: Some(false),
        mount_options: vec!["noatime".into()],
    });
    s.directories.push(Directory {
        path: "/var/lib/data/cache".into(),
        mode: Some(0o750),
        ..Directory::default()
    });
    c.ignition.config = Some(IgnitionConfig {
        merge: vec![],
        replace: Some(Resource::remote(
            "https://example.com/full.ign",
            Some(format!("sha512-{}", "ab".repeat(64))),
        )),
    });
    common::ignition::validate(&json(&c)).unwrap();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
    /// Whatever text lands in a hint, a kernel argument or a label, the
    /// install env file keeps its `KEY="value"` shape and the JoinConfiguration
    /// keeps its lines: bad values are refused, never rendered.
    #[test]
    fn values_never_break_file_shapes(
        s in "[ -~\n\r\t\"$`\\\\']{0,24}",
    ) {
        let (_, mut m, mut class) = examples().remove(0);
        m.spec.root_device_hints.get_or_insert_with(Default::default).model = Some(s.clone());
        class.spec.kernel_args = vec![s.clone()];
        if let Ok(cfg) = render(Stage::Install, &m, &class, &secrets(), &url_ctx()) {
            for line in file(&cfg, "/etc/metalherd/install.env").lines() {
                let ok = line.starts_with('#')
                    || line.split_once("=\"").is_some_and(|(k, v)| {
                        k.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                            && v.ends_with('"')
                            && !v[..v.len() - 1].contains(['"', '$', '`', '\\'])
                    });
                proptest::prop_assert!(ok, "{line:?}");
            }
        }
        let (_, m, mut class) = examples().remove(0);
        class.spec.node_labels.insert("metalherd.dev/x".into(), s.clone());
        class.spec.join.api_server_endpoint = format!("{s}:6443");
        if let Ok(cfg) = render(Stage::Node, &m, &class, &secrets(), &url_ctx()) {
            let join = file(&cfg, "/etc/metalherd/kubeadm-join.yaml");
            let (_, m, mut base) = examples().remove(0);
            base.spec.node_labels.insert("metalherd.dev/x".into(), "v".into());
            let base = file(
                &render(Stage::Node, &m, &base, &secrets(), &url_ctx()).unwrap(),
                "/etc/metalherd/kubeadm-join.yaml",
            );
            proptest::prop_assert_eq!(join.lines().count(), base.lines().count(), "{}", join);
        }
    }
}

#[test]
fn cli_renders_from_a_running_server() {
    let s = common::server::Server::start();
    let ex = common::repo_root().join("deploy/examples");
    let secret = s.dir.path().join("join-token.yaml");
    std::fs::write(
        &secret,
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: join-token\n  namespace: default\nstringData:\n  token: {JOIN_TOKEN}\n"),
    )
    .unwrap();
    // Without the Secret the render is refused, naming the field.
    for f in ["class-flatcar.yaml", "machine-flatcar.yaml"] {
        let out = s.cli(&["apply", "-f", ex.join(f).to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            s.log()
        );
    }
    let out = s.cli(&["render", "ignition", "rack1-u07", "--stage", "node"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.join.tokenSecretRef: Secret \"join-token\" not found"),
        "{err}"
    );
    let out = s.cli(&["apply", "-f", secret.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for stage in ["install", "node"] {
        let out = s.cli(&[
            "render",
            "ignition",
            "rack1-u07",
            "--stage",
            stage,
            "-n",
            "default",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(!text.contains(JOIN_TOKEN), "{stage}");
        common::ignition::validate(&text).unwrap_or_else(|e| panic!("{stage}: {e}"));
        let out = s.cli(&[
            "render",
            "ignition",
            "rack1-u07",
            "--stage",
            stage,
            "--show-secrets",
        ]);
        assert!(
            String::from_utf8(out.stdout).unwrap().contains(JOIN_TOKEN),
            "{stage}"
        );
    }
    assert!(
        !s.log().contains(JOIN_TOKEN),
        "server log leaks the join token"
    );
}
