//! Shared harness for integration tests: processes that die with the test,
//! network namespaces that are removed on drop, and paths to the tools the
//! tests need. A missing tool is a loud failure, never a skip.
#![allow(dead_code)]

pub mod balancer;
pub mod bmc_proxy;
pub mod boot_server;
pub mod bootlab;
pub mod browser;
pub mod capi_lab;
pub mod capi_objects;
pub mod cluster_api;
pub mod control_plane;
pub mod deploy;
pub mod dhcp6;
pub mod dhcp_clients;
pub mod dhcp_serve;
pub mod dns_tcp;
pub mod failover;
pub mod ignition;
pub mod initramfs;
pub mod ipmi_emulators;
pub mod kubectl;
pub mod kubectl_diff;
pub mod lab;
pub mod lab_config;
pub mod lab_disk;
pub mod lab_leaks;
pub mod lab_nodes;
pub mod lan;
pub mod manifests;
pub mod netns;
pub mod ns_proxy;
pub mod out_of_service;
pub mod proc;
pub mod qemu;
pub mod qemu_boot;
pub mod rack;
pub mod redfish_server;
pub mod server;
pub mod sim_boot;
pub mod sim_rack;
pub mod sushy;
pub mod tftp;
pub mod vbmc;
pub mod writes;

use std::path::PathBuf;

/// Path of the `metalherd` binary built for this test run. Cargo names it
/// only to integration tests; the benchmarks in `examples/` also include
/// this harness, and their binary sits in `target/<profile>/examples/`,
/// beside the `metalherd` one level up.
pub fn metalherd_bin() -> PathBuf {
    match option_env!("CARGO_BIN_EXE_metalherd") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| Some(e.parent()?.parent()?.join("metalherd")))
            .unwrap_or_else(|| PathBuf::from("metalherd")),
    }
}

/// Repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Python venv with the BMC emulators (created by scripts/setup).
pub fn venv() -> PathBuf {
    std::env::var_os("METALHERD_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv"))
}

/// Find a tool on PATH (or an absolute path); panic with the fix when missing.
pub fn require_tool(name: &str) -> PathBuf {
    let p = PathBuf::from(name);
    if p.is_absolute() {
        assert!(p.exists(), "{name} is missing: run scripts/setup");
        return p;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain(
        ["/usr/sbin", "/sbin", "/usr/local/sbin"]
            .iter()
            .map(PathBuf::from),
    ) {
        let c = dir.join(name);
        if c.is_file() {
            return c;
        }
    }
    panic!("required tool {name:?} is not installed: run scripts/setup");
}

/// Tests that need network namespaces run as root (CI does).
pub fn require_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test creates network namespaces and must run as root"
    );
}

/// Remove `dir` once this test process has exited, however it exits. A
/// harness kept in a `static` for the whole binary (the shared control
/// plane) is never dropped, so its `TempDir` would outlive every run: a
/// detached watcher waits for this process's PID and removes the
/// directory after it. Harmless when `Drop` removed it first.
pub fn remove_when_process_exits(dir: &std::path::Path) {
    use std::os::unix::process::CommandExt as _;
    let spawned = std::process::Command::new(require_tool("sh"))
        .args([
            "-c",
            r#"tail --pid="$1" -f /dev/null; rm -rf -- "$2""#,
            "remove-when-process-exits",
        ])
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
    if let Err(e) = spawned {
        panic!("watcher removing {} at exit: {e}", dir.display());
    }
}

/// A short unique suffix for names of namespaces, interfaces and files.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    // Interface names are limited to 15 bytes: keep this short.
    format!("{prefix}{:x}{n:x}", std::process::id() & 0xffff)
}

/// A free TCP/UDP port on loopback (best effort: bind 0 and release).
pub fn free_port() -> u16 {
    // The kernel may hand the same ephemeral port out again as soon as the
    // probe below closes it; two servers of one test then race for it (a
    // replica's boot port and its API port did): never return a port twice
    // in one test process.
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// An API server a test declares objects in: the stand-in (`metalherd
/// serve`) or a real kube-apiserver ([`control_plane::ControlPlane`]).
pub trait Api {
    /// An authorized JSON request: (status code, JSON body or Null).
    fn req(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, serde_json::Value);
    /// The server's log, for failure messages.
    fn api_log(&self) -> String;
}

impl Api for server::Server {
    fn req(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        server::Server::req(self, method, path, body)
    }
    fn api_log(&self) -> String {
        self.log()
    }
}

impl Api for control_plane::ControlPlane {
    fn req(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        control_plane::ControlPlane::req(self, method, path, body)
    }
    fn api_log(&self) -> String {
        rack::tail(&self.log("kube-apiserver"), 40)
    }
}

impl<T: Api + ?Sized> Api for std::sync::Arc<T> {
    fn req(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        (**self).req(method, path, body)
    }
    fn api_log(&self) -> String {
        (**self).api_log()
    }
}
