//! A real Kubernetes control plane for a test: etcd and kube-apiserver
//! (and kube-controller-manager when asked), the release
//! `scripts/kubernetes-build` builds from the Go module proxy, started in
//! a temp directory with PKI generated here, on loopback, with an audit
//! log of every request. Tests reach it through an admin kubeconfig (a
//! static token in `system:masters`) or through tokens of their own.
//!
//! One control plane serves a whole test binary ([`shared`]): its
//! processes are spawned from a keeper thread that lives as long as the
//! test process and carry a parent-death signal, so they are killed when
//! the test binary exits, also when a test fails. Tests on a shared
//! control plane keep to namespaces of their own ([`ControlPlane::namespace`]).
//!
//! A control plane can also run inside a network namespace the test made
//! ([`ControlPlane::start_in_netns`]): it then listens on that namespace's
//! loopback, reachable only from processes started there, and the
//! requests and kubectl runs below are made from inside it too.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::netns::Netns;
use super::proc::{ChildGuard, wait_for};
use super::server::text;
use super::{free_port, repo_root};

mod pki;
use pki::Pki;

/// The Kubernetes release the tests run against (scripts/kubernetes-build).
pub const KUBE_VERSION: &str = "v1.34.4";

/// Where the built binaries are: `METALHERD_KUBE_BIN`, else what
/// `scripts/kubernetes-build` prints (it builds them when missing, loudly).
pub fn kube_bin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(d) = std::env::var_os("METALHERD_KUBE_BIN") {
            return PathBuf::from(d);
        }
        let out = Command::new(repo_root().join("scripts/kubernetes-build"))
            .output()
            .expect("run scripts/kubernetes-build");
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "scripts/kubernetes-build failed:\n{stderr}"
        );
        PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
    })
    .clone()
}

/// The release before [`KUBE_VERSION`] whose kubelet and kubeadm
/// `scripts/kubernetes-build-previous` builds (the lab rolls nodes from it).
pub const PREVIOUS_KUBE_VERSION: &str = "v1.34.3";

/// Where kubelet and kubeadm of [`PREVIOUS_KUBE_VERSION`] are: what
/// `scripts/kubernetes-build-previous` prints (it builds them when missing,
/// loudly; setup builds them first).
pub fn previous_kube_bin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new(repo_root().join("scripts/kubernetes-build-previous"))
            .output()
            .expect("run scripts/kubernetes-build-previous");
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "scripts/kubernetes-build-previous failed:\n{stderr}"
        );
        PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
    })
    .clone()
}

/// The OCI archives of [`PREVIOUS_KUBE_VERSION`]'s kube-apiserver,
/// kube-controller-manager and kube-scheduler (`NAME.tar`, its reference
/// in `NAME.names`): `scripts/kubernetes-build-previous --control-plane`
/// builds them (loudly, minutes, when missing) beside the binaries.
pub fn previous_control_plane_images() -> PathBuf {
    let out = Command::new(repo_root().join("scripts/kubernetes-build-previous"))
        .arg("--control-plane")
        .output()
        .expect("run scripts/kubernetes-build-previous --control-plane");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "scripts/kubernetes-build-previous --control-plane failed:\n{stderr}"
    );
    let bin = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    bin.parent().expect("the build's directory").join("images")
}

/// The path of one built binary (`kube-apiserver`, `etcd`, `kubectl`, ...).
pub fn kube_bin(name: &str) -> PathBuf {
    let p = kube_bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} is missing: run scripts/kubernetes-build",
        p.display()
    );
    p
}

/// What a test asks of its control plane.
#[derive(Clone, Copy, Default)]
pub struct Options {
    /// Also run kube-controller-manager (CSR signing, namespace deletion,
    /// garbage collection, Node lifecycle).
    pub controller_manager: bool,
}

pub struct ControlPlane {
    pub dir: tempfile::TempDir,
    /// `https://127.0.0.1:PORT`
    pub url: String,
    /// The admin's static token (group `system:masters`).
    pub token: String,
    /// A static token for [`METALHERD_USER`] (group `system:masters`).
    pub metalherd_token: String,
    /// How long etcd and kube-apiserver took to answer `/readyz`.
    pub started_in: Duration,
    procs: Mutex<Vec<ChildGuard>>,
    /// The network namespace its processes (and [`ControlPlane::raw`],
    /// [`ControlPlane::kubectl`]) run in, if any. Dropped after the
    /// processes: removing it kills whatever still runs inside.
    pub ns: Option<Arc<Netns>>,
}

/// The users of the static token file: the test's admin, and an admin
/// user for metalherd, so the audit log tells metalherd's requests from
/// the test's.
const ADMIN_USER: &str = "metalherd-test-admin";
pub const METALHERD_USER: &str = "metalherd";

impl ControlPlane {
    /// Start etcd and kube-apiserver (and kube-controller-manager when
    /// asked) and wait until the API server is ready; the CRDs are not
    /// installed ([`ControlPlane::install_crds`]).
    pub fn start(opts: Options) -> ControlPlane {
        ControlPlane::start_in(opts, None)
    }

    /// [`ControlPlane::start`] inside `ns` (a host of a `Lan`, say): etcd,
    /// kube-apiserver and kube-controller-manager listen on its loopback,
    /// so servers started in `ns` reach it at [`ControlPlane::url`].
    pub fn start_in_netns(opts: Options, ns: Arc<Netns>) -> ControlPlane {
        ControlPlane::start_in(opts, Some(ns))
    }

    fn start_in(opts: Options, ns: Option<Arc<Netns>>) -> ControlPlane {
        let t0 = Instant::now();
        if let Some(ns) = &ns {
            keep_source_ports_apart(ns);
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        super::remove_when_process_exits(d);
        let pki = Pki::generate(d);
        let token = format!("admin-{:016x}", rand::random::<u64>());
        let metalherd_token = format!("metalherd-{:016x}", rand::random::<u64>());
        std::fs::write(
            d.join("tokens.csv"),
            format!(
                "{token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n\
                 {metalherd_token},{METALHERD_USER},{METALHERD_USER},\"system:masters\"\n"
            ),
        )
        .expect("token file");
        std::fs::write(
            d.join("audit-policy.yaml"),
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
             rules:\n- level: Metadata\n",
        )
        .expect("audit policy");

        let etcd_port = free_port();
        let peer_port = free_port();
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let mut procs = Vec::new();
        let mut etcd = in_ns(ns.as_deref(), &kube_bin("etcd"));
        etcd.args(["--name", "test", "--data-dir"])
            .arg(d.join("etcd"))
            .args(["--listen-client-urls", &etcd_url])
            .args(["--advertise-client-urls", &etcd_url])
            .args([
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
            ])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
            ])
            .args([
                "--initial-cluster",
                &format!("test=http://127.0.0.1:{peer_port}"),
            ])
            .args(["--unsafe-no-fsync", "--log-level", "warn"]);
        procs.push(spawn_kept("etcd", etcd, &d.join("etcd.log")));

        let port = free_port();
        let url = format!("https://127.0.0.1:{port}");
        let mut api = in_ns(ns.as_deref(), &kube_bin("kube-apiserver"));
        api.args(["--etcd-servers", &etcd_url])
            .args([
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
            ])
            .args(["--secure-port", &port.to_string()])
            .arg(format!("--tls-cert-file={}", pki.server_cert.display()))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.server_key.display()
            ))
            .arg(format!("--client-ca-file={}", pki.ca_cert.display()))
            .arg(format!(
                "--token-auth-file={}",
                d.join("tokens.csv").display()
            ))
            .arg(format!(
                "--service-account-key-file={}",
                pki.sa_pub.display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                pki.sa_key.display()
            ))
            .args([
                "--service-account-issuer",
                "https://kubernetes.default.svc.cluster.local",
            ])
            .args(["--service-cluster-ip-range", "10.96.0.0/24"])
            .args(["--authorization-mode", "Node,RBAC"])
            .arg("--enable-bootstrap-token-auth")
            .arg(format!(
                "--audit-policy-file={}",
                d.join("audit-policy.yaml").display()
            ))
            .arg(format!(
                "--audit-log-path={}",
                d.join("audit.log").display()
            ))
            .args(["--audit-log-format", "json"])
            .args(["--profiling=false", "--v=0"]);
        procs.push(spawn_kept(
            "kube-apiserver",
            api,
            &d.join("kube-apiserver.log"),
        ));
        let cp = ControlPlane {
            dir,
            url,
            token,
            metalherd_token,
            started_in: Duration::ZERO,
            procs: Mutex::new(procs),
            ns,
        };
        cp.write_kubeconfig(&cp.admin_kubeconfig(), &cp.token);
        cp.wait_ready();
        if opts.controller_manager {
            cp.start_controller_manager(&pki);
        }
        let cp = ControlPlane {
            started_in: t0.elapsed(),
            ..cp
        };
        eprintln!(
            "control plane: etcd and kube-apiserver {KUBE_VERSION} ready in {:.1} s ({})",
            cp.started_in.as_secs_f64(),
            cp.dir.path().display()
        );
        cp
    }

    fn start_controller_manager(&self, pki: &Pki) {
        let d = self.dir.path();
        let kc = d.join("controller-manager.kubeconfig");
        self.write_kubeconfig(&kc, &self.token);
        let mut kcm = self.command(&kube_bin("kube-controller-manager"));
        kcm.arg(format!("--kubeconfig={}", kc.display()))
            .arg(format!("--authentication-kubeconfig={}", kc.display()))
            .arg(format!("--authorization-kubeconfig={}", kc.display()))
            .args(["--bind-address", "127.0.0.1", "--secure-port", "0"])
            .arg(format!(
                "--cluster-signing-cert-file={}",
                pki.ca_cert.display()
            ))
            .arg(format!(
                "--cluster-signing-key-file={}",
                pki.ca_key.display()
            ))
            .arg(format!("--root-ca-file={}", pki.ca_cert.display()))
            .arg(format!(
                "--service-account-private-key-file={}",
                pki.sa_key.display()
            ))
            .args([
                "--use-service-account-credentials=true",
                "--leader-elect=false",
            ])
            .args(["--controllers", "*,bootstrapsigner,tokencleaner"]);
        let g = spawn_kept(
            "kube-controller-manager",
            kcm,
            &d.join("kube-controller-manager.log"),
        );
        self.procs.lock().expect("procs").push(g);
    }

    fn wait_ready(&self) {
        let mut exited = false;
        let ok = wait_for(Duration::from_secs(120), || {
            if self
                .procs
                .lock()
                .expect("procs")
                .iter_mut()
                .any(|p| !p.running())
            {
                exited = true;
                return Some(false);
            }
            let (code, _) = self.raw("GET", "/readyz", Some(&self.token), None, "");
            (code == 200).then_some(true)
        })
        .filter(|ready| *ready);
        if ok.is_none() {
            panic!(
                "kube-apiserver never became ready (a process exited: {exited}); its log tail:\n{}\netcd log tail:\n{}",
                super::rack::tail(&self.log("kube-apiserver"), 40),
                super::rack::tail(&self.log("etcd"), 20)
            );
        }
    }

    /// A command that runs where the control plane runs (its network
    /// namespace, if any).
    pub fn command(&self, program: &Path) -> Command {
        in_ns(self.ns.as_deref(), program)
    }

    /// The log of one of the processes (`etcd`, `kube-apiserver`, ...).
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("pki/ca.crt")
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// A kubeconfig for metalherd as [`METALHERD_USER`] (an admin): for
    /// `serve --store kubernetes` where the story is not about RBAC.
    pub fn metalherd_kubeconfig(&self) -> PathBuf {
        let p = self.dir.path().join("metalherd.kubeconfig");
        self.write_kubeconfig(&p, &self.metalherd_token);
        p
    }

    /// Write a kubeconfig for `token` to `path`.
    pub fn write_kubeconfig(&self, path: &Path, token: &str) {
        let ca = std::fs::read(self.ca_cert()).expect("CA");
        let kc = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "test", "cluster": {
                "server": self.url,
                "certificate-authority-data": base64(&ca)}}],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user", "namespace": "default"}}],
            "current-context": "test",
        });
        std::fs::write(path, kc.to_string()).expect("write kubeconfig");
    }

    /// A request with `token`: (status code, JSON body or Null).
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        content_type: &str,
    ) -> (u16, Value) {
        let mut cmd = self.command(Path::new("curl"));
        cmd.arg("--cacert").arg(self.ca_cert());
        super::server::curl_request(
            &mut cmd,
            &format!("{}{path}", self.url),
            method,
            token,
            body,
            content_type,
        )
    }

    /// An admin JSON request.
    pub fn req(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.raw(method, path, Some(&self.token), body, "application/json")
    }

    /// Create the namespace `name` (fine when it exists).
    pub fn namespace(&self, name: &str) {
        let (code, body) = self.req(
            "POST",
            "/api/v1/namespaces",
            Some(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
        );
        assert!(code < 300 || code == 409, "namespace {name}: {code} {body}");
    }

    /// `kubectl` (the release built with the API server) as the admin.
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let out = self
            .command(&kube_bin("kubectl"))
            .env("KUBECONFIG", self.admin_kubeconfig())
            .env("HOME", self.dir.path())
            .args(args)
            .output()
            .expect("run kubectl");
        let (o, e) = text(&out);
        (out.status.success(), o, e)
    }

    /// Apply deploy/crds/ and wait until every CRD is established.
    pub fn install_crds(&self) {
        let crds = repo_root().join("deploy/crds");
        let (ok, out, err) = self.kubectl(&["apply", "-f", crds.to_str().expect("utf-8")]);
        assert!(
            ok,
            "kubectl apply -f deploy/crds/ on kube-apiserver: {out}{err}"
        );
        // `kubectl wait` fails at once, rather than waiting, on a CRD whose
        // status the API server has not written yet (".status.conditions
        // accessor error"): ask again until the deadline.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (ok, out, err) = self.kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd",
                "--all",
            ]);
            if ok {
                break;
            }
            let racing = err.contains("accessor error") && Instant::now() < deadline;
            assert!(racing, "CRDs not established: {out}{err}");
            std::thread::sleep(Duration::from_millis(200));
        }
        // Established is not yet published: the OpenAPI schema that
        // `kubectl explain` and server-side apply read follows a moment
        // later ("couldn't find resource for ..."). Ask until each kind
        // explains.
        for kind in [
            "machines",
            "machineclasses",
            "machinesets",
            "discoveredmachines",
        ] {
            loop {
                let (ok, out, err) = self.kubectl(&["explain", &format!("{kind}.metadata")]);
                if ok {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{kind}: schema not published: {out}{err}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    /// Every audit event so far (one JSON object per line).
    pub fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// kube-apiserver holds hundreds of loopback connections (to etcd, to
/// itself), each on a source port from the namespace's ephemeral range.
/// Servers started beside it listen on a [`free_port`], which comes from
/// the host's ephemeral range and is free on the host only: so that it is
/// free in `ns` too, the namespace's source ports are taken from the range
/// below the host's (the setting is per network namespace).
fn keep_source_ports_apart(ns: &Netns) {
    let host = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .expect("the host's ephemeral port range");
    let low: u32 = host
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port range");
    assert!(low > 4096, "the host's ephemeral ports start at {low}");
    ns.exec(&[
        "sysctl",
        "-w",
        &format!("net.ipv4.ip_local_port_range={} {}", low / 2, low - 1),
    ]);
}

/// `program`, inside `ns` when given.
fn in_ns(ns: Option<&Netns>, program: &Path) -> Command {
    match ns {
        Some(ns) => ns.command(program.to_str().expect("utf-8 path")),
        None => Command::new(program),
    }
}

/// The control plane of this test binary, started on first use with the
/// CRDs installed, kept until the test process exits.
pub fn shared() -> Arc<ControlPlane> {
    static CP: OnceLock<Arc<ControlPlane>> = OnceLock::new();
    CP.get_or_init(|| {
        let cp = ControlPlane::start(Options {
            controller_manager: true,
        });
        cp.install_crds();
        Arc::new(cp)
    })
    .clone()
}

/// Spawn `cmd` from the keeper thread, which lives as long as the test
/// process: the child gets SIGKILL when that thread ends (the test binary
/// exits), and the guard kills it by PID when dropped before that.
pub fn spawn_kept(name: &str, cmd: Command, log: &Path) -> ChildGuard {
    type Job = (
        Command,
        PathBuf,
        String,
        std::sync::mpsc::Sender<ChildGuard>,
    );
    static KEEPER: OnceLock<Mutex<std::sync::mpsc::Sender<Job>>> = OnceLock::new();
    // setpriv sets the parent-death signal and execs the program, so the
    // signal follows the keeper thread (the parent), not a test's thread.
    let mut kept = Command::new(super::require_tool("setpriv"));
    kept.args(["--pdeathsig", "KILL", "--"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => kept.env(k, v),
            None => kept.env_remove(k),
        };
    }
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::spawn(move || {
            for (mut cmd, log, name, back) in rx {
                let _ = back.send(ChildGuard::spawn(&name, &mut cmd, &log));
            }
        });
        Mutex::new(tx)
    });
    let (tx, rx) = std::sync::mpsc::channel();
    keeper
        .lock()
        .expect("keeper")
        .send((kept, log.to_path_buf(), name.to_string(), tx))
        .expect("keeper thread");
    rx.recv().expect("spawned")
}

fn base64(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}
