//! TFTP test helpers: metalherd's TFTP server started in-process on a free
//! loopback port, a fixture directory, a raw UDP client for packets real
//! clients cannot be made to send, and bounded runs of curl / atftp.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use metalherd::files::{DirSource, FileSource, MemorySource, Overlay};
use metalherd::tftp::packet::Packet;
use metalherd::tftp::{NoEvents, TftpConfig, TftpMetrics};
use tokio_util::sync::CancellationToken;

/// How long any single client run or raw exchange may take before the
/// test gives up (a hang guard, not a performance threshold).
pub const CLIENT_LIMIT: Duration = Duration::from_secs(120);

pub struct TftpFixture {
    pub addr: SocketAddr,
    pub metrics: TftpMetrics,
    pub cancel: CancellationToken,
    pub task: Option<tokio::task::JoinHandle<()>>,
    /// The served root (and, beside it, `outside/` for escape attempts).
    pub dir: tempfile::TempDir,
    pub mem: MemorySource,
}

impl TftpFixture {
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn url(&self, file: &str) -> String {
        format!("tftp://{}/{}", self.addr, file)
    }

    /// Stop the server and wait for it to drain.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(t) = self.task.take() {
            tokio::time::timeout(CLIENT_LIMIT, t)
                .await
                .expect("server stops")
                .expect("server task");
        }
    }
}

/// A root with `ipxe.efi` (Debian's), `random.bin` (odd size),
/// `exact.bin` (a multiple of 512 bytes), `empty`, `sub/nested.txt`, a
/// symlink `escape` to `outside/secret`, and a symlink `inside` to
/// `sub/nested.txt`; plus a virtual file `virtual/hello.txt`.
pub async fn start(tweak: impl FnOnce(&mut TftpConfig)) -> TftpFixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"do not serve me").unwrap();
    let ipxe = Path::new("/usr/lib/ipxe/ipxe.efi");
    assert!(
        ipxe.exists(),
        "{} is missing: run scripts/setup",
        ipxe.display()
    );
    std::fs::copy(ipxe, root.join("ipxe.efi")).unwrap();
    std::fs::write(root.join("random.bin"), pseudo_random(300_007)).unwrap();
    std::fs::write(root.join("exact.bin"), pseudo_random(512 * 40)).unwrap();
    std::fs::write(root.join("empty"), b"").unwrap();
    std::fs::write(root.join("sub/nested.txt"), b"nested\n").unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), root.join("escape")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("escdir")).unwrap();
    std::os::unix::fs::symlink("sub/nested.txt", root.join("inside")).unwrap();

    let mem = MemorySource::new();
    mem.insert("virtual/hello.txt", &b"hello from memory\n"[..]);
    let source: Arc<dyn FileSource> = Arc::new(Overlay {
        upper: Arc::new(mem.clone()),
        lower: Arc::new(DirSource::new(&root).unwrap()),
    });

    let mut config = TftpConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        root: root.clone(),
        ..TftpConfig::default()
    };
    tweak(&mut config);
    let settings = metalherd::tftp::TftpSettings::try_from(&config).expect("settings");
    let server = metalherd::tftp::bind(&settings).expect("bind");
    let addr = server.local_addr();
    let metrics = TftpMetrics::default();
    let cancel = CancellationToken::new();
    let task =
        tokio::spawn(server.serve(source, Arc::new(NoEvents), metrics.clone(), cancel.clone()));
    TftpFixture {
        addr,
        metrics,
        cancel,
        task: Some(task),
        dir,
        mem,
    }
}

/// Deterministic bytes that do not compress or repeat per block.
pub fn pseudo_random(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ n as u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Run a client process to the end (killed if it outlives [`CLIENT_LIMIT`]).
pub async fn run_client(program: &str, args: &[&str], cwd: &Path) -> Output {
    let bin = crate::common::require_tool(program);
    let child = tokio::process::Command::new(bin)
        .args(args)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    tokio::time::timeout(CLIENT_LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{program} {args:?} did not finish"))
        .expect("wait")
}

/// `curl` fetching `url` into `out`.
pub async fn curl(url: &str, out: &Path, extra: &[&str]) -> Output {
    let out_s = out.to_str().unwrap();
    let mut args = vec!["-sS", "--max-time", "100", "-o", out_s];
    args.extend_from_slice(extra);
    args.push(url);
    run_client("curl", &args, out.parent().unwrap()).await
}

/// `atftp -g` fetching `remote` into `out`, with `--option` values.
pub async fn atftp_get(addr: SocketAddr, remote: &str, out: &Path, options: &[&str]) -> Output {
    let port = addr.port().to_string();
    let ip = addr.ip().to_string();
    let mut args = vec!["-g", "-r", remote, "-l", out.to_str().unwrap()];
    for o in options {
        args.push("--option");
        args.push(o);
    }
    args.push(&ip);
    args.push(&port);
    run_client("atftp", &args, out.parent().unwrap()).await
}

/// A raw client socket on loopback with a receive timeout (hang guard).
pub fn raw_socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Receive one packet: its source (the server's TID) and the decoded packet.
pub fn recv_packet(s: &UdpSocket) -> (SocketAddr, Packet) {
    let mut buf = vec![0u8; 70_000];
    let (n, from) = s.recv_from(&mut buf).expect("a reply from the server");
    (from, Packet::decode(&buf[..n]).expect("a valid packet"))
}

/// Wait (off the runtime's threads) until `f` holds, up to [`CLIENT_LIMIT`].
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + CLIENT_LIMIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
