//! A `metalherd serve` started by a test: a temp data directory, a free
//! loopback port, its log in the temp directory, killed on drop. Helpers
//! run the CLI against it and make raw HTTP requests.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::netns::Netns;
use super::proc::{ChildGuard, wait_for};
use super::{free_port, metalherd_bin};

pub struct Server {
    pub guard: ChildGuard,
    pub dir: tempfile::TempDir,
    pub data_dir: PathBuf,
    pub addr: String,
    pub url: String,
    pub token: String,
    /// How many times the server was started.
    pub starts: u32,
    /// When isolated: the network namespace (only loopback) the server, the
    /// CLI and curl run in, so whatever the controllers try to reach (BMCs
    /// named in test manifests) stays inside it. Dropped last: removing it
    /// kills whatever still runs inside.
    pub ns: Option<Arc<Netns>>,
    /// Flags added to `serve`, on every start.
    pub args: Vec<String>,
}

impl Server {
    /// Start `metalherd serve` without the Machine controller (API and CLI
    /// tests declare Machines whose BMC addresses are not meant to be
    /// reached) and wait until it answers `/healthz`.
    pub fn start() -> Server {
        Server::start_with_config(Some("controller:\n  enabled: false\n"))
    }

    /// Start with a config file holding `yaml` (written into the temp dir).
    pub fn start_with_config(yaml: Option<&str>) -> Server {
        Server::start_in(yaml, None, Vec::new())
    }

    /// Start with a config file holding `yaml` and these extra `serve`
    /// flags (for example `--store kubernetes --kubeconfig FILE`).
    pub fn start_with_args(yaml: Option<&str>, args: &[&str]) -> Server {
        Server::start_in(yaml, None, args.iter().map(|a| a.to_string()).collect())
    }

    /// Start in a fresh network namespace with only loopback: for tests whose
    /// manifests name BMCs nobody runs (API and CLI stories).
    pub fn start_isolated() -> Server {
        Server::start_in(None, Some(Arc::new(Netns::new("mhapi"))), Vec::new())
    }

    /// Start in a namespace the test made (a host of a `Lan`), shared with
    /// other servers and clients there, with a config file holding `yaml`
    /// and these extra `serve` flags.
    pub fn start_in_netns(yaml: Option<&str>, ns: Arc<Netns>, args: &[&str]) -> Server {
        Server::start_in(yaml, Some(ns), args.iter().map(|a| a.to_string()).collect())
    }

    fn start_in(yaml: Option<&str>, ns: Option<Arc<Netns>>, args: Vec<String>) -> Server {
        super::require_tool("curl");
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("data");
        if let Some(y) = yaml {
            std::fs::write(dir.path().join("config.yaml"), y).expect("config file");
        }
        let addr = format!("127.0.0.1:{}", free_port());
        let guard = Server::spawn(ns.as_deref(), dir.path(), &data_dir, &addr, &args, 0);
        let url = format!("https://{addr}");
        let mut s = Server {
            guard,
            dir,
            data_dir,
            addr,
            url,
            token: String::new(),
            starts: 1,
            ns,
            args,
        };
        s.wait_up();
        s.token = std::fs::read_to_string(s.data_dir.join("api-token"))
            .expect("api-token written on start")
            .trim()
            .to_string();
        s
    }

    fn spawn(
        ns: Option<&Netns>,
        dir: &std::path::Path,
        data_dir: &std::path::Path,
        addr: &str,
        args: &[String],
        n: u32,
    ) -> ChildGuard {
        let mut cmd = in_ns(ns, metalherd_bin().to_str().expect("utf-8 path"));
        cmd.args(["serve", "--listen", addr, "--data-dir"])
            .arg(data_dir)
            .args(args)
            .env("METALHERD_LOG", "info");
        let config = dir.join("config.yaml");
        if config.exists() {
            cmd.arg("--config").arg(&config);
        }
        let log = if n == 0 {
            dir.join("serve.log")
        } else {
            dir.join(format!("serve.{n}.log"))
        };
        ChildGuard::spawn("metalherd serve", &mut cmd, &log)
    }

    fn wait_up(&self) {
        let up = wait_for(Duration::from_secs(30), || {
            let out = self
                .curl()
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
                .arg(format!("{}/healthz", self.url))
                .output()
                .ok()?;
            (out.stdout == b"200").then_some(())
        });
        assert!(
            up.is_some(),
            "metalherd serve did not come up; log:\n{}",
            self.log()
        );
    }

    /// SIGKILL the server and start it again on the same data directory,
    /// address and config (its log goes to `serve.N.log`).
    pub fn kill_and_restart(&mut self) {
        self.restart_after(|_| {});
    }

    /// SIGKILL the server, let `between` change its data directory (the
    /// store is free then), and start it again.
    pub fn restart_after(&mut self, between: impl FnOnce(&std::path::Path)) {
        self.guard.kill9();
        between(&self.data_dir);
        self.guard = Server::spawn(
            self.ns.as_deref(),
            self.dir.path(),
            &self.data_dir,
            &self.addr,
            &self.args,
            self.starts,
        );
        self.starts += 1;
        self.wait_up();
    }

    /// The logs of every start, oldest first.
    /// A command that runs where the server runs (its namespace, if any).
    pub fn command(&self, program: &str) -> Command {
        in_ns(self.ns.as_deref(), program)
    }

    /// curl, where the server runs, trusting the data directory's CA (the
    /// API is served over TLS with the certificate `serve` generated).
    pub fn curl(&self) -> Command {
        let mut c = self.command("curl");
        c.arg("--cacert").arg(self.data_dir.join("ca.crt"));
        c
    }

    /// `metalherd`, where the server runs.
    pub fn metalherd(&self) -> Command {
        self.command(metalherd_bin().to_str().expect("utf-8 path"))
    }

    pub fn log(&self) -> String {
        let mut out =
            std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default();
        for n in 1..self.starts {
            let p = self.dir.path().join(format!("serve.{n}.log"));
            out.push_str(&format!("---- restart {n} ----\n"));
            out.push_str(&std::fs::read_to_string(p).unwrap_or_default());
        }
        out
    }

    /// Run `metalherd ARGS` against this server (found through its data
    /// directory, as a user's CLI would).
    pub fn cli(&self, args: &[&str]) -> Output {
        self.metalherd()
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(args)
            .env_remove("METALHERD_SERVER")
            .env_remove("METALHERD_TOKEN")
            .output()
            .expect("run metalherd")
    }

    /// `metalherd kubeconfig` for this server (its address, CA and token),
    /// as kubectl, kube-rs or `serve --store kubernetes` use it.
    pub fn kubeconfig(&self) -> String {
        let out = self.cli(&["kubeconfig"]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "metalherd kubeconfig: {stderr}");
        stdout
    }

    /// [`Server::kubeconfig`] written into the server's temp directory;
    /// returns its path.
    pub fn kubeconfig_file(&self) -> PathBuf {
        let path = self.dir.path().join("kubeconfig");
        std::fs::write(&path, self.kubeconfig()).expect("write kubeconfig");
        path
    }

    /// A raw request; returns (status code, JSON body or Null).
    pub fn http(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        content_type: &str,
    ) -> (u16, Value) {
        let mut cmd = self.curl();
        curl_request(
            &mut cmd,
            &format!("{}{path}", self.url),
            method,
            token,
            body,
            content_type,
        )
    }

    /// An authorized JSON request.
    pub fn req(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.http(method, path, Some(&self.token), body, "application/json")
    }
}

fn in_ns(ns: Option<&Netns>, program: &str) -> Command {
    match ns {
        Some(ns) => ns.command(program),
        None => Command::new(program),
    }
}

/// Run `curl` (already given its CA) for one request to `url`: (status
/// code, JSON body or Null).
pub fn curl_request(
    cmd: &mut Command,
    url: &str,
    method: &str,
    token: Option<&str>,
    body: Option<&Value>,
    content_type: &str,
) -> (u16, Value) {
    cmd.args(["-s", "-X", method, "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    if let Some(b) = body {
        cmd.args(["-H", &format!("Content-Type: {content_type}")]);
        cmd.args(["--data-binary", &b.to_string()]);
    }
    cmd.arg(url);
    let out = cmd.output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

/// stdout and stderr of a CLI run, for assertions and failure messages.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}
