//! The one way metalherd writes a private file: the secrets and state of
//! the data directory (API token, boot token key, TLS keys and
//! certificates, the server URL) and the exports that carry Secrets.
//!
//! The bytes go to a temporary file in the same directory, created with
//! mode 0600 (never readable by others, not even for a moment), written and
//! fsynced; then the file is published under its name and the directory is
//! fsynced. Whatever stops the writer (a crash, SIGKILL, a full disk), the
//! path holds the old file or the new one, complete, never a half-written
//! one. A failed write removes its temporary file.
//!
//! [`replace`] publishes by `rename` (the new file wins); [`create_new`]
//! by `link`, which fails with `AlreadyExists` when the path exists, so two
//! processes creating the same key cannot both believe theirs is on disk.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of every file written here.
pub const MODE: u32 = 0o600;

/// Write `bytes` to `path` (mode 0600), replacing what is there.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    publish(path, bytes, |tmp, path| std::fs::rename(tmp, path))
}

/// Write `bytes` to a new file `path` (mode 0600); `AlreadyExists` when
/// the path exists (it is left as it was).
pub fn create_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    publish(path, bytes, |tmp, path| {
        std::fs::hard_link(tmp, path)?;
        std::fs::remove_file(tmp)
    })
}

fn publish(
    path: &Path,
    bytes: &[u8],
    how: impl FnOnce(&Path, &Path) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = temp_name(&dir, path);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(MODE)
            .open(&tmp)?;
        // The process umask may only have narrowed the mode; make it exact.
        f.set_permissions(std::fs::Permissions::from_mode(MODE))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        how(&tmp, path)?;
        File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Remove the temporary files killed writers left in `dir` (names of the
/// [`temp_name`] shape); returns how many went.
pub fn remove_stale(dir: &Path) -> io::Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if is_temp_name(&name) && e.file_type()?.is_file() {
            std::fs::remove_file(e.path())?;
            n += 1;
        }
    }
    Ok(n)
}

/// `.NAME.PID.NONCE.tmp` with a decimal PID and a 16-digit hex nonce.
fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.').and_then(|r| r.strip_suffix(".tmp")) else {
        return false;
    };
    let mut parts = rest.rsplitn(3, '.');
    let (Some(nonce), Some(pid), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    !file.is_empty()
        && !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && nonce.len() == 16
        && nonce.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `.NAME.PID.RANDOM.tmp` beside `path`: hidden, and unique per attempt
/// so a stale one from a killed writer is never reused.
fn temp_name(dir: &Path, path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nonce: u64 = rand::random();
    dir.join(format!(".{name}.{}.{nonce:016x}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests;
