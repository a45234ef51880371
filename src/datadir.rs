//! The data directory's layout: the names of the files `serve` keeps there
//! (store, API token, server URL, TLS certificates, boot token key, DHCP
//! leases, image cache) and the helpers that create them. Shared
//! by `serve` (which writes them) and the CLI (which reads them), so neither
//! imports the other.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// File name of the embedded store inside the data directory.
pub const STORE_FILE: &str = "metalherd.redb";
/// File holding the API bearer token (mode 0600).
pub const TOKEN_FILE: &str = "api-token";
/// File holding the URL the API server listens on, for the CLI.
pub const SERVER_URL_FILE: &str = "server-url";
/// The CA certificate clients trust (PEM), created on first start.
pub const CA_CERT_FILE: &str = "ca.crt";
/// The CA's private key (PEM).
pub const CA_KEY_FILE: &str = "ca.key";
/// The API server's certificate, signed by the CA (PEM).
pub const SERVER_CERT_FILE: &str = "server.crt";
/// The API server certificate's private key (PEM).
pub const SERVER_KEY_FILE: &str = "server.key";
/// The key of the per-boot tokens (32 random bytes, mode 0600): created by
/// boot HTTP, or installed from the shared Secret by the leader.
pub const BOOT_TOKEN_KEY_FILE: &str = "boot-token.key";
/// DHCP's lease database (redb), beside the two journal files of
/// [`DHCP_JOURNAL_FILES`] that every lease change is appended to first.
pub const DHCP_LEASE_FILE: &str = "dhcp-leases.redb";
/// DHCP's lease journals, written alternately.
pub const DHCP_JOURNAL_FILES: [&str; 2] = ["dhcp-leases.journal.0", "dhcp-leases.journal.1"];
/// Boot HTTP's image cache: verified images named by their sha256.
pub const IMAGE_CACHE_DIR: &str = "cache";
/// Boot HTTP's virtual media ISOs, one per boot (`<boot id>.iso`).
pub const VMEDIA_DIR: &str = "vmedia";

/// Create the data directory (0700) and prove it is writable, with one
/// clear line when it is not. The directory holds secrets (API token, boot
/// token key, leases, BMC credentials in the store): from here on the
/// process creates files for its owner only (umask 077), and what an older
/// version or a person left readable inside is tightened (directories 0700,
/// files 0600).
pub fn prepare_data_dir(dir: &Path) -> anyhow::Result<()> {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let unwritable = |e: std::io::Error| {
        anyhow::anyhow!("data directory {} is not writable: {e}", dir.display())
    };
    std::fs::create_dir_all(dir).map_err(unwritable)?;
    tighten(dir).map_err(|e| {
        anyhow::anyhow!("cannot make data directory {} private: {e}", dir.display())
    })?;
    // Temporary files of writes a crash interrupted (the files themselves
    // are whole: crate::private_file).
    crate::private_file::remove_stale(dir).map_err(unwritable)?;
    let probe = dir.join(".write-test");
    std::fs::write(&probe, b"").map_err(unwritable)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Directories 0700 and files 0600 under `dir` (itself included);
/// symbolic links are left alone (not followed).
fn tighten(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, mode: u32, have: u32| {
        if have & 0o777 != mode {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        } else {
            Ok(())
        }
    };
    let meta = std::fs::symlink_metadata(dir)?;
    set(dir, 0o700, meta.permissions().mode())?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        let path = entry.path();
        if meta.is_dir() {
            tighten(&path)?;
        } else if meta.is_file() {
            set(&path, 0o600, meta.permissions().mode())?;
        }
    }
    Ok(())
}

/// Read the API token, or create a random one (mode 0600) on first start.
pub fn load_or_create_token(dir: &Path) -> anyhow::Result<String> {
    load_or_create_token_once(dir, true)
}

/// One read-or-create; `retry`: when another process creates the file
/// between our read and our create, read theirs (once: a file that keeps
/// vanishing or staying empty is an error, not a loop).
fn load_or_create_token_once(dir: &Path, retry: bool) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => {
            // Tighten a token file someone loosened.
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
            return Ok(t.trim().to_string());
        }
        Ok(_) => {
            let _ = std::fs::remove_file(&path);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => anyhow::bail!("cannot read API token {}: {e}", path.display()),
    }
    let mut bytes = [0u8; 32];
    rand::Rng::fill(&mut rand::rng(), &mut bytes);
    let token = hex::encode(bytes);
    match crate::private_file::create_new(&path, format!("{token}\n").as_bytes()) {
        Ok(()) => Ok(token),
        // Another process created it first: theirs is the token.
        Err(e) if retry && e.kind() == std::io::ErrorKind::AlreadyExists => {
            load_or_create_token_once(dir, false)
        }
        Err(e) => Err(e).with_context(|| format!("cannot create API token {}", path.display())),
    }
}

/// Write the URL clients use to reach us (loopback for wildcard binds;
/// `https` unless the API is served over plain HTTP).
pub fn write_server_url(dir: &Path, bound: SocketAddr, tls: bool) -> anyhow::Result<()> {
    let host = match bound.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => "127.0.0.1".to_string(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V4(ip) => ip.to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
    };
    let scheme = if tls { "https" } else { "http" };
    let url = format!("{scheme}://{host}:{}\n", bound.port());
    let path: PathBuf = dir.join(SERVER_URL_FILE);
    crate::private_file::replace(&path, url.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_created_once_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let t1 = load_or_create_token(d.path()).unwrap();
        let t2 = load_or_create_token(d.path()).unwrap();
        assert_eq!(t1, t2);
        assert_eq!(t1.len(), 64);
        let mode = std::fs::metadata(d.path().join(TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn what_others_could_read_is_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("data");
        std::fs::create_dir_all(data.join("cache/ab")).unwrap();
        for (p, m) in [("", 0o755), ("cache", 0o755), ("cache/ab", 0o777)] {
            std::fs::set_permissions(data.join(p), std::fs::Permissions::from_mode(m)).unwrap();
        }
        for f in ["api-token", "cache/ab/image"] {
            std::fs::write(data.join(f), b"x").unwrap();
            std::fs::set_permissions(data.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        prepare_data_dir(&data).unwrap();
        let mode = |p: &str| {
            std::fs::metadata(data.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        for p in ["", "cache", "cache/ab"] {
            assert_eq!(mode(p), 0o700, "{p}");
        }
        for f in ["api-token", "cache/ab/image"] {
            assert_eq!(mode(f), 0o600, "{f}");
        }
    }

    #[test]
    fn data_dir_under_a_file_is_refused_in_one_line() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("file");
        std::fs::write(&f, "").unwrap();
        let e = prepare_data_dir(&f.join("sub")).unwrap_err().to_string();
        assert!(e.starts_with("data directory "), "{e}");
        assert!(!e.contains('\n'));
    }
}
