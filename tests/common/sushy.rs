//! sushy-tools' Redfish emulator with its fake driver, started from the
//! venv on 127.0.0.1 and a free port, with Basic auth from an htpasswd file
//! (bcrypt: the only digest sushy accepts) and optionally HTTPS. Its state
//! lives in a temp dir, so every test starts from the systems it declares.
//! Killed when dropped.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::proc::{ChildGuard, wait_for};

/// One fake system.
#[derive(Clone, Debug)]
pub struct FakeSystem {
    pub uuid: String,
    pub name: String,
    pub power_state: &'static str,
    pub macs: Vec<String>,
}

impl FakeSystem {
    pub fn new(n: u8) -> FakeSystem {
        FakeSystem {
            uuid: format!("27946b59-9e44-4fa7-8e91-f3527a1ef0{n:02x}"),
            name: format!("node-{n}"),
            power_state: "Off",
            macs: vec![
                format!("52:54:00:aa:{n:02x}:01"),
                format!("52:54:00:aa:{n:02x}:02"),
            ],
        }
    }
}

#[derive(Clone, Debug)]
pub struct SushyOptions {
    pub systems: Vec<FakeSystem>,
    /// `(username, password)` for Basic auth; `None` runs without auth.
    pub auth: Option<(String, String)>,
    /// `(certificate PEM, key PEM)` paths for HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
}

impl Default for SushyOptions {
    fn default() -> Self {
        SushyOptions {
            systems: vec![FakeSystem::new(1)],
            auth: Some(("admin".into(), "sushy-pw-7f3a".into())),
            tls: None,
        }
    }
}

pub struct Sushy {
    pub port: u16,
    pub opts: SushyOptions,
    pub dir: tempfile::TempDir,
    guard: ChildGuard,
}

impl Sushy {
    pub fn start(opts: SushyOptions) -> Sushy {
        let bin = super::venv().join("bin/sushy-emulator");
        assert!(
            bin.exists(),
            "sushy-emulator missing at {}: run scripts/setup",
            bin.display()
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let port = super::free_port();
        let systems: Vec<String> = opts
            .systems
            .iter()
            .map(|s| {
                let nics: Vec<String> =
                    s.macs.iter().map(|m| format!("{{'mac': '{m}'}}")).collect();
                format!(
                    "{{'uuid': '{}', 'name': '{}', 'power_state': '{}', 'nics': [{}]}}",
                    s.uuid,
                    s.name,
                    s.power_state,
                    nics.join(", ")
                )
            })
            .collect();
        let mut conf = format!(
            "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n\
             SUSHY_EMULATOR_LISTEN_PORT = {port}\n\
             SUSHY_EMULATOR_FAKE_DRIVER = True\n\
             SUSHY_EMULATOR_STATE_DIR = '{}'\n\
             SUSHY_EMULATOR_FAKE_SYSTEMS = [{}]\n",
            dir.path().join("state").display(),
            systems.join(", ")
        );
        if let Some((user, pass)) = &opts.auth {
            let htpasswd = dir.path().join("htpasswd");
            let out = Command::new(super::venv().join("bin/python3"))
                .args([
                    "-c",
                    "import bcrypt,sys; print(bcrypt.hashpw(sys.stdin.read().encode(), bcrypt.gensalt(rounds=4)).decode())",
                ])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    use std::io::Write;
                    c.stdin.take().expect("stdin").write_all(pass.as_bytes())?;
                    c.wait_with_output()
                })
                .expect("bcrypt via the venv's python");
            assert!(out.status.success(), "bcrypt hashing failed");
            let hash = String::from_utf8(out.stdout).expect("utf8");
            std::fs::write(&htpasswd, format!("{user}:{}\n", hash.trim())).expect("htpasswd");
            conf.push_str(&format!(
                "SUSHY_EMULATOR_AUTH_FILE = '{}'\n",
                htpasswd.display()
            ));
        }
        if let Some((cert, key)) = &opts.tls {
            conf.push_str(&format!(
                "SUSHY_EMULATOR_SSL_CERT = '{}'\nSUSHY_EMULATOR_SSL_KEY = '{}'\n",
                cert.display(),
                key.display()
            ));
        }
        let conf_path = dir.path().join("sushy.conf");
        std::fs::write(&conf_path, conf).expect("sushy config");
        let guard = ChildGuard::spawn(
            "sushy-emulator",
            Command::new(&bin).arg("--config").arg(&conf_path),
            &dir.path().join("sushy.log"),
        );
        let s = Sushy {
            port,
            opts,
            dir,
            guard,
        };
        let up = wait_for(Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        assert!(up.is_some(), "sushy-emulator did not listen:\n{}", s.log());
        s
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sushy.log")).unwrap_or_default()
    }

    pub fn scheme(&self) -> &'static str {
        if self.opts.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// `redfish+http://127.0.0.1:PORT/redfish/v1/Systems/UUID` of system `i`.
    pub fn address(&self, i: usize) -> String {
        format!(
            "redfish+{}://127.0.0.1:{}/redfish/v1/Systems/{}",
            self.scheme(),
            self.port,
            self.opts.systems[i].uuid
        )
    }

    /// The service's base URL (`http://127.0.0.1:PORT`).
    pub fn base(&self) -> url::Url {
        url::Url::parse(&format!("{}://127.0.0.1:{}", self.scheme(), self.port)).expect("url")
    }

    pub fn pid(&self) -> u32 {
        self.guard.pid()
    }

    /// Turn system `i`'s Secure Boot on or off through its SecureBoot
    /// resource, as an operator would.
    pub async fn set_secure_boot(&self, i: usize, on: bool) {
        let (u, p) = self.opts.auth.clone().expect("auth");
        let r = reqwest::Client::new()
            .patch(format!(
                "{}redfish/v1/Systems/{}/SecureBoot",
                self.base(),
                self.opts.systems[i].uuid
            ))
            .basic_auth(u, Some(p))
            .json(&serde_json::json!({ "SecureBootEnable": on }))
            .send()
            .await
            .expect("patch SecureBoot");
        assert!(r.status().is_success(), "{r:?}");
    }
}
