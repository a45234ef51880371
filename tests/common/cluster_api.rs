//! Cluster API's own controllers for a test: the core manager, the kubeadm
//! bootstrap provider (CABPK) and the kubeadm control plane provider (KCP)
//! of the release `scripts/cluster-api-build` builds from the Go module
//! proxy, run as processes on loopback against a test's real
//! kube-apiserver ([`ControlPlane`]).
//!
//! What a cluster's installation (kustomize and cert-manager) would do is
//! done here: the components' CRDs are installed with the labels naming
//! their contract versions and with conversion addressed to the component
//! that serves it; a self-signed serving certificate for 127.0.0.1 stands
//! in for cert-manager's, and each component's admission webhooks are
//! registered at `https://127.0.0.1:<its port><path>` with that certificate
//! as CA bundle, so defaulting, validation and conversion run for real.
//!
//! The managers are spawned from a keeper thread that lives as long as the
//! test process and carry a parent-death signal (as the control plane's
//! processes do), so they die with the test binary; dropping the
//! [`ClusterApi`] kills them sooner. Their webhook configurations stay in
//! the API server: one [`ClusterApi`] per control plane.
//!
//! The API server is a [`Target`]: a test's [`ControlPlane`], or the lab's
//! kube-apiserver in its rack's namespace ([`Lab`], after
//! [`Lab::kube_up`]), where the managers then run too (the webhooks'
//! 127.0.0.1 is that namespace's loopback, which kube-apiserver shares).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::control_plane::{ControlPlane, spawn_kept};
use super::lab::Lab;
use super::proc::{ChildGuard, wait_for};
use super::server::text;
use super::{free_port, repo_root};

/// The Cluster API release the tests run (scripts/cluster-api-build).
pub const CAPI_VERSION: &str = "v1.14.2";

/// The three managers: (component, binary). A component's name is the one
/// its webhook manifest has in the build's `webhooks/` directory.
pub const COMPONENTS: [(&str, &str); 3] = [
    ("core", "cluster-api-manager"),
    ("bootstrap", "kubeadm-bootstrap-manager"),
    ("controlplane", "kubeadm-control-plane-manager"),
];

/// Where the built binaries are: `METALHERD_CAPI_BIN`, else what
/// `scripts/cluster-api-build` prints (it builds them when missing, loudly).
/// The CRDs and webhook manifests are beside it (`../crds`, `../webhooks`).
pub fn bin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(d) = std::env::var_os("METALHERD_CAPI_BIN") {
            return PathBuf::from(d);
        }
        let out = Command::new(repo_root().join("scripts/cluster-api-build"))
            .output()
            .expect("run scripts/cluster-api-build");
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "scripts/cluster-api-build failed:\n{stderr}"
        );
        PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
    })
    .clone()
}

/// The path of one built binary (`cluster-api-manager`, `clusterctl`, ...).
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} is missing: run scripts/cluster-api-build",
        p.display()
    );
    p
}

/// The API server the managers run against, and where they run.
pub trait Target {
    /// A command that runs beside the API server (its network namespace).
    fn command(&self, program: &Path) -> Command;
    /// An admin kubeconfig for the managers.
    fn kubeconfig(&self) -> PathBuf;
    /// `kubectl` as the admin: (success, stdout, stderr).
    fn kubectl(&self, args: &[&str]) -> (bool, String, String);
}

impl Target for ControlPlane {
    fn command(&self, program: &Path) -> Command {
        ControlPlane::command(self, program)
    }
    fn kubeconfig(&self) -> PathBuf {
        self.admin_kubeconfig()
    }
    fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        ControlPlane::kubectl(self, args)
    }
}

impl<T: Target> Target for std::sync::Arc<T> {
    fn command(&self, program: &Path) -> Command {
        (**self).command(program)
    }
    fn kubeconfig(&self) -> PathBuf {
        (**self).kubeconfig()
    }
    fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        (**self).kubectl(args)
    }
}

/// The lab's kube-apiserver ([`Lab::kube_up`]), as its admin, from inside
/// the rack's namespace.
impl Target for Lab {
    fn command(&self, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).arg(program);
        c
    }
    fn kubeconfig(&self) -> PathBuf {
        self.run.join("kube/admin.kubeconfig")
    }
    fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        Lab::kubectl(self, args)
    }
}

/// One running manager and where it listens.
struct Manager {
    component: &'static str,
    binary: &'static str,
    webhook_port: u16,
    health_port: u16,
    proc: ChildGuard,
}

/// Cluster API's three managers running against one control plane.
pub struct ClusterApi {
    /// Certificates, the rewritten manifests and the managers' logs.
    pub dir: tempfile::TempDir,
    /// The webhook servers' certificate (PEM), also their CA bundle.
    pub serving_cert: String,
    managers: Mutex<Vec<Manager>>,
}

impl ClusterApi {
    /// Install the CRDs, start the managers with their default feature
    /// gates, wait until each is ready, and register their webhooks.
    pub fn start(cp: &impl Target) -> ClusterApi {
        ClusterApi::start_with_feature_gates(cp, "")
    }

    /// [`ClusterApi::start`] with `--feature-gates=<gates>` given to every
    /// manager (`"KubeadmBootstrapFormatIgnition=true"`, say: without it
    /// CABPK's and KCP's webhooks refuse `format: ignition`).
    pub fn start_with_feature_gates(cp: &impl Target, gates: &str) -> ClusterApi {
        let t0 = Instant::now();
        let dir = tempfile::tempdir().expect("tempdir");
        let certs = dir.path().join("certs");
        std::fs::create_dir_all(&certs).expect("cert dir");
        let key = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
        ])
        .expect("webhook serving certificate");
        let serving_cert = key.cert.pem();
        std::fs::write(certs.join("tls.crt"), &serving_cert).expect("tls.crt");
        std::fs::write(certs.join("tls.key"), key.signing_key.serialize_pem()).expect("tls.key");
        let ports: Vec<(u16, u16, u16)> = COMPONENTS
            .iter()
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let capi = ClusterApi {
            dir,
            serving_cert,
            managers: Mutex::new(Vec::new()),
        };
        let webhook_port = |component: &str| {
            let i = COMPONENTS
                .iter()
                .position(|(c, _)| *c == component)
                .expect("a component");
            ports[i].0
        };
        capi.install_crds(cp, &webhook_port);

        for (&(component, binary), &(webhook, health, diagnostics)) in COMPONENTS.iter().zip(&ports)
        {
            let mut cmd = cp.command(&bin(binary));
            cmd.arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
                .arg("--leader-elect=false")
                .arg(format!("--webhook-port={webhook}"))
                .arg(format!("--webhook-cert-dir={}", certs.display()))
                .arg(format!("--health-addr=127.0.0.1:{health}"))
                .arg(format!("--diagnostics-address=127.0.0.1:{diagnostics}"))
                .arg("--insecure-diagnostics");
            if !gates.is_empty() {
                cmd.arg(format!("--feature-gates={gates}"));
            }
            let log = capi.dir.path().join(format!("{component}.log"));
            let proc = spawn_kept(binary, cmd, &log);
            capi.managers.lock().expect("managers").push(Manager {
                component,
                binary,
                webhook_port: webhook,
                health_port: health,
                proc,
            });
        }
        capi.wait_ready(cp);
        capi.register_webhooks(cp, &webhook_port);
        eprintln!(
            "cluster api: {CAPI_VERSION} core, kubeadm bootstrap and control plane managers ready in {:.1} s ({})",
            t0.elapsed().as_secs_f64(),
            capi.dir.path().display()
        );
        capi
    }

    /// The log of one manager (`core`, `bootstrap`, `controlplane`).
    pub fn log(&self, component: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{component}.log")))
            .unwrap_or_default()
    }

    /// The last lines of every manager's log, for a failure message.
    pub fn logs_tail(&self, lines: usize) -> String {
        COMPONENTS
            .iter()
            .map(|(c, _)| {
                format!(
                    "---- {c} log tail:\n{}",
                    super::rack::tail(&self.log(c), lines)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The port a component's webhook server listens on (all interfaces:
    /// the managers have no flag for the webhook host).
    pub fn webhook_port(&self, component: &str) -> u16 {
        self.managers
            .lock()
            .expect("managers")
            .iter()
            .find(|m| m.component == component)
            .map(|m| m.webhook_port)
            .unwrap_or_else(|| panic!("no component {component}"))
    }

    /// The CRDs as released, with what kustomize would add: the contract
    /// labels (`cluster.x-k8s.io/<contract>: <versions>`, from the
    /// components' `config/crd/kustomization.yaml`; core resolves a
    /// referenced bootstrap config or control plane through them), the
    /// provider label, and conversion through the serving component's
    /// `/convert` (they serve v1beta1 and store v1beta2). Applied server
    /// side: they are too big for kubectl's last-applied annotation.
    fn install_crds(&self, cp: &impl Target, webhook_port: &dyn Fn(&str) -> u16) {
        let src = bin_dir().join("../crds");
        let out = self.dir.path().join("crds");
        std::fs::create_dir_all(&out).expect("crds dir");
        let mut names = Vec::new();
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&src)
            .unwrap_or_else(|e| panic!("{}: {e}: run scripts/cluster-api-build", src.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let mut crd = read_yaml(&path).into_iter().next().expect("a CRD");
            let group = crd["spec"]["group"].as_str().expect("group").to_string();
            let (component, provider, contract) = match group.as_str() {
                "bootstrap.cluster.x-k8s.io" => ("bootstrap", "bootstrap-kubeadm", true),
                "controlplane.cluster.x-k8s.io" => ("controlplane", "control-plane-kubeadm", true),
                _ => ("core", "cluster-api", false),
            };
            let labels = &mut crd["metadata"]["labels"];
            labels["cluster.x-k8s.io/provider"] = json!(provider);
            if contract {
                labels["cluster.x-k8s.io/v1beta1"] = json!("v1beta1");
                labels["cluster.x-k8s.io/v1beta2"] = json!("v1beta2");
            }
            crd["spec"]["conversion"] = json!({
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {
                        "url": format!("https://127.0.0.1:{}/convert", webhook_port(component)),
                        "caBundle": base64(self.serving_cert.as_bytes()),
                    },
                },
            });
            let name = crd["metadata"]["name"].as_str().expect("name").to_string();
            std::fs::write(out.join(format!("{name}.json")), crd.to_string()).expect("write CRD");
            names.push(name);
        }
        apply(cp, &out);
        let mut args = vec![
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
        ];
        args.extend(names.iter().map(String::as_str));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (ok, o, e) = cp.kubectl(&args);
            if ok {
                break;
            }
            // As in ControlPlane::install_crds: a CRD without status yet.
            assert!(
                e.contains("accessor error") && Instant::now() < deadline,
                "Cluster API CRDs not established: {o}{e}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Wait until every manager answers `/readyz` (its webhook server is
    /// serving, its caches synced); panic with the logs if one exits.
    fn wait_ready(&self, cp: &impl Target) {
        let mut managers = self.managers.lock().expect("managers");
        for m in managers.iter_mut() {
            let url = format!("http://127.0.0.1:{}/readyz", m.health_port);
            let ready = wait_for(Duration::from_secs(90), || {
                if !m.proc.running() {
                    return Some(false);
                }
                let out = cp
                    .command(Path::new("curl"))
                    .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &url])
                    .output()
                    .ok()?;
                (out.stdout == b"200").then_some(true)
            });
            assert!(
                ready == Some(true),
                "{} never became ready (exited: {});\n{}",
                m.binary,
                ready.is_some(),
                self.logs_tail(40)
            );
        }
    }

    /// Each component's `config/webhook/manifests.yaml`, its webhooks
    /// addressed to `https://127.0.0.1:<port><path>` instead of the
    /// Service, the configurations named after the component (they share
    /// names in the release). Applied core last, and effective once core's
    /// Machine defaulting is seen in a dry run: kube-apiserver's webhook
    /// informers see the configurations in the order they were created.
    fn register_webhooks(&self, cp: &impl Target, webhook_port: &dyn Fn(&str) -> u16) {
        let out = self.dir.path().join("webhooks");
        std::fs::create_dir_all(&out).expect("webhooks dir");
        let ca = base64(self.serving_cert.as_bytes());
        let mut n = 0;
        for component in ["bootstrap", "controlplane", "core"] {
            let src = bin_dir().join(format!("../webhooks/{component}.yaml"));
            for mut doc in read_yaml(&src) {
                let name = doc["metadata"]["name"].as_str().expect("name").to_string();
                doc["metadata"]["name"] = json!(format!("capi-{component}-{name}"));
                for hook in doc["webhooks"].as_array_mut().expect("webhooks") {
                    let path = hook["clientConfig"]["service"]["path"]
                        .as_str()
                        .expect("a Service path")
                        .to_string();
                    hook["clientConfig"] = json!({
                        "url": format!("https://127.0.0.1:{}{path}", webhook_port(component)),
                        "caBundle": ca,
                    });
                }
                n += 1;
                // kubectl applies a directory in file name order.
                std::fs::write(
                    out.join(format!("{n:02}-{component}-{name}.json")),
                    doc.to_string(),
                )
                .expect("write webhook configuration");
            }
        }
        apply(cp, &out);
        let probe = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "webhook-probe", "namespace": "default"},
            "spec": {
                "clusterName": "probe",
                "bootstrap": {"dataSecretName": "probe"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Probe", "name": "probe"},
            },
        });
        // A server-side dry run (`?dryRun=All`) through kubectl, which
        // reaches every [`Target`]'s API server.
        let file = self.dir.path().join("webhook-probe.json");
        std::fs::write(&file, probe.to_string()).expect("write the probe");
        let file = file.to_str().expect("utf-8 path");
        let create = || cp.kubectl(&["create", "--dry-run=server", "-o", "json", "-f", file]);
        let seen = wait_for(Duration::from_secs(30), || {
            let (ok, out, _) = create();
            let body: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
            (body["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "probe").then_some(())
        });
        assert!(
            seen.is_some(),
            "core's Machine defaulting webhook never took effect: {:?}\n{}",
            create(),
            self.logs_tail(20)
        );
    }
}

/// `kubectl apply --server-side` of a directory of manifests.
fn apply(cp: &impl Target, dir: &Path) {
    let d = dir.to_str().expect("utf-8 path");
    let (ok, out, err) = cp.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=metalherd-test-cluster-api",
        "-f",
        d,
    ]);
    assert!(ok, "kubectl apply --server-side -f {d}: {out}{err}");
}

/// The documents of a YAML file, as JSON.
fn read_yaml(path: &Path) -> Vec<Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}: run scripts/cluster-api-build", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

fn base64(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}
