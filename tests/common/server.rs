//! A `metalherd serve` started by a test: a temp data directory, a free
//! loopback port, its log in the temp directory, killed on drop. Helpers
//! run the CLI against it and make raw HTTP requests.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use super::proc::{ChildGuard, wait_for};
use super::{free_port, metalherd_bin};

pub struct Server {
    pub guard: ChildGuard,
    pub dir: tempfile::TempDir,
    pub data_dir: PathBuf,
    pub addr: String,
    pub url: String,
    pub token: String,
}

impl Server {
    /// Start `metalherd serve` and wait until it answers `/healthz`.
    pub fn start() -> Server {
        super::require_tool("curl");
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("data");
        let addr = format!("127.0.0.1:{}", free_port());
        let guard = ChildGuard::spawn(
            "metalherd serve",
            Command::new(metalherd_bin())
                .args(["serve", "--listen", &addr, "--data-dir"])
                .arg(&data_dir)
                .env("METALHERD_LOG", "info"),
            &dir.path().join("serve.log"),
        );
        let url = format!("http://{addr}");
        let mut s = Server {
            guard,
            dir,
            data_dir,
            addr,
            url,
            token: String::new(),
        };
        let up = wait_for(Duration::from_secs(30), || {
            let out = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
                .arg(format!("{}/healthz", s.url))
                .output()
                .ok()?;
            (out.stdout == b"200").then_some(())
        });
        assert!(
            up.is_some(),
            "metalherd serve did not come up; log:\n{}",
            s.log()
        );
        s.token = std::fs::read_to_string(s.data_dir.join("api-token"))
            .expect("api-token written on start")
            .trim()
            .to_string();
        s
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// Run `metalherd ARGS` against this server (found through its data
    /// directory, as a user's CLI would).
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(metalherd_bin())
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(args)
            .env_remove("METALHERD_SERVER")
            .env_remove("METALHERD_TOKEN")
            .output()
            .expect("run metalherd")
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
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "-X", method, "-w", "\n%{http_code}"]);
        if let Some(t) = token {
            cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        if let Some(b) = body {
            cmd.args(["-H", &format!("Content-Type: {content_type}")]);
            cmd.args(["--data-binary", &b.to_string()]);
        }
        cmd.arg(format!("{}{path}", self.url));
        let out = cmd.output().expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        let code: u16 = code.trim().parse().unwrap_or(0);
        (code, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    /// An authorized JSON request.
    pub fn req(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.http(method, path, Some(&self.token), body, "application/json")
    }
}

/// stdout and stderr of a CLI run, for assertions and failure messages.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}
