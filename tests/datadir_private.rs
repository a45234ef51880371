//! Story: the data directory holds secrets (the API token, the boot token
//! key, the store with BMC credentials, DHCP leases). After a real `serve`
//! start with boot HTTP on, the directory and every directory in it are
//! 0700 and every file in it 0600.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::server::Server;

fn walk(dir: &Path, out: &mut Vec<(PathBuf, u32, bool)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let meta = e.metadata().unwrap();
        let mode = meta.permissions().mode() & 0o777;
        out.push((e.path(), mode, meta.is_dir()));
        if meta.is_dir() {
            walk(&e.path(), out);
        }
    }
}

#[test]
fn the_data_directory_is_private_after_serve_starts() {
    let port = common::free_port();
    let yaml = format!("controller:\n  enabled: false\nboot:\n  listen: 127.0.0.1:{port}\n");
    let s = Server::start_with_config(Some(&yaml));
    // The boot service writes its token key as it starts.
    for _ in 0..100 {
        if s.data_dir.join("boot-token.key").exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut found = vec![];
    walk(&s.data_dir, &mut found);
    let names: Vec<String> = found
        .iter()
        .map(|(p, _, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "metalherd.redb",
        "api-token",
        "server-url",
        "boot-token.key",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    let top = std::fs::metadata(&s.data_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(top, 0o700, "{}", s.data_dir.display());
    for (path, mode, is_dir) in found {
        let want = if is_dir { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{} is {mode:o}", path.display());
    }
}
