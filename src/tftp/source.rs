//! Where TFTP files come from: the [`FileSource`] trait, a read-only
//! directory ([`DirSource`]) in which no request can reach outside the root
//! (no `..`, absolute paths, backslashes, NULs, or symlinks leading out),
//! in-memory virtual files ([`MemorySource`]) and an [`Overlay`] of two
//! sources. Files are read in chunks, never whole. Knows nothing of TFTP
//! packets; error messages never carry server paths.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

/// Why a file cannot be served. The `Display` text is safe to send to a
/// client: it never includes server paths.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    #[error("file not found")]
    NotFound,
    #[error("access violation")]
    Forbidden,
    #[error("read error")]
    Io(#[source] std::io::Error),
}

impl SourceError {
    pub fn reason(&self) -> &'static str {
        match self {
            SourceError::NotFound => "not_found",
            SourceError::Forbidden => "forbidden",
            SourceError::Io(_) => "io",
        }
    }
}

/// An open file, read front to back.
#[async_trait]
pub trait FileHandle: Send {
    /// Size in bytes, when known (answers the `tsize` option).
    fn size(&self) -> Option<u64>;
    /// Fill `buf` completely, or partly only at the end of the file;
    /// returns how many bytes were written.
    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;
}

/// Read-only files by name, as a TFTP client asks for them.
#[async_trait]
pub trait FileSource: Send + Sync {
    async fn open(&self, name: &str) -> Result<Box<dyn FileHandle>, SourceError>;
}

/// Split a requested name into safe relative components, or refuse it.
/// Allowed: `a/b/c`, `./a` and repeated slashes inside. Refused: empty
/// names, absolute paths, `..`, backslashes, NUL and other control bytes.
pub fn sanitize(name: &str) -> Result<Vec<&str>, SourceError> {
    if name.is_empty()
        || name.starts_with('/')
        || name.bytes().any(|b| b == b'\\' || b < 0x20 || b == 0x7f)
    {
        return Err(SourceError::Forbidden);
    }
    let mut parts = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(SourceError::Forbidden),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(SourceError::Forbidden);
    }
    Ok(parts)
}

/// Serves regular files under a root directory.
pub struct DirSource {
    root: PathBuf,
}

impl DirSource {
    /// The root must exist; it is canonicalized once here.
    pub fn new(root: &Path) -> std::io::Result<DirSource> {
        Ok(DirSource {
            root: root.canonicalize()?,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// Resolve a request to a path inside `root` (canonical), following
/// symlinks only as long as they stay inside it.
fn resolve(root: &Path, name: &str) -> Result<PathBuf, SourceError> {
    let parts = sanitize(name)?;
    let mut p = root.to_path_buf();
    p.extend(parts);
    let real = p.canonicalize().map_err(map_io)?;
    if !real.starts_with(root) {
        return Err(SourceError::Forbidden);
    }
    Ok(real)
}

fn map_io(e: std::io::Error) -> SourceError {
    match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => SourceError::NotFound,
        std::io::ErrorKind::PermissionDenied => SourceError::Forbidden,
        _ => SourceError::Io(e),
    }
}

fn open_regular(path: &Path) -> Result<(std::fs::File, u64), SourceError> {
    use std::os::unix::fs::OpenOptionsExt;
    // The path is canonical: no component is a symlink now. O_NOFOLLOW makes
    // a symlink swapped in for the file itself since then fail to open.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => SourceError::Forbidden,
            _ => map_io(e),
        })?;
    let meta = f.metadata().map_err(map_io)?;
    if !meta.is_file() {
        // Directories, FIFOs and devices are not files to serve.
        return Err(SourceError::NotFound);
    }
    Ok((f, meta.len()))
}

#[async_trait]
impl FileSource for DirSource {
    async fn open(&self, name: &str) -> Result<Box<dyn FileHandle>, SourceError> {
        // Refuse bad names before any file system call.
        sanitize(name)?;
        let root = self.root.clone();
        let name = name.to_string();
        let (file, size) =
            tokio::task::spawn_blocking(move || open_regular(&resolve(&root, &name)?))
                .await
                .map_err(|e| SourceError::Io(std::io::Error::other(e)))??;
        Ok(Box::new(DirFile {
            file: Some(file),
            size,
            buf: Vec::new(),
            pos: 0,
            eof: false,
        }))
    }
}

/// Bytes read from disk per blocking call: large enough that a 1 MiB file
/// takes 16 calls, small enough that thousands of transfers stay cheap.
const CHUNK: usize = 64 * 1024;

struct DirFile {
    file: Option<std::fs::File>,
    size: u64,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
}

impl DirFile {
    async fn refill(&mut self) -> std::io::Result<()> {
        let Some(mut f) = self.file.take() else {
            self.eof = true;
            return Ok(());
        };
        let mut buf = std::mem::take(&mut self.buf);
        let res = tokio::task::spawn_blocking(move || {
            buf.clear();
            buf.resize(CHUNK, 0);
            let mut n = 0;
            while n < CHUNK {
                match f.read(&mut buf[n..]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            buf.truncate(n);
            Ok((f, buf))
        })
        .await
        .map_err(std::io::Error::other)?;
        let (f, buf) = res?;
        self.eof = buf.len() < CHUNK;
        self.file = (!self.eof).then_some(f);
        self.buf = buf;
        self.pos = 0;
        Ok(())
    }
}

#[async_trait]
impl FileHandle for DirFile {
    fn size(&self) -> Option<u64> {
        Some(self.size)
    }

    async fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < out.len() {
            if self.pos >= self.buf.len() {
                if self.eof {
                    break;
                }
                self.refill().await?;
                continue;
            }
            let avail = &self.buf[self.pos..];
            let k = avail.len().min(out.len() - n);
            out[n..n + k].copy_from_slice(&avail[..k]);
            self.pos += k;
            n += k;
        }
        Ok(n)
    }
}

/// Virtual files served from memory (generated scripts, test fixtures).
#[derive(Default, Clone)]
pub struct MemorySource {
    files: Arc<std::sync::RwLock<HashMap<String, Bytes>>>,
}

impl MemorySource {
    pub fn new() -> MemorySource {
        MemorySource::default()
    }

    /// Add or replace a file. Names are matched after [`sanitize`], so
    /// `./a//b` finds `a/b`.
    pub fn insert(&self, name: &str, data: impl Into<Bytes>) {
        let key = sanitize(name)
            .map(|p| p.join("/"))
            .unwrap_or_else(|_| name.to_string());
        if let Ok(mut m) = self.files.write() {
            m.insert(key, data.into());
        }
    }
}

#[async_trait]
impl FileSource for MemorySource {
    async fn open(&self, name: &str) -> Result<Box<dyn FileHandle>, SourceError> {
        let key = sanitize(name)?.join("/");
        let data = self
            .files
            .read()
            .ok()
            .and_then(|m| m.get(&key).cloned())
            .ok_or(SourceError::NotFound)?;
        Ok(Box::new(MemFile { data }))
    }
}

struct MemFile {
    data: Bytes,
}

#[async_trait]
impl FileHandle for MemFile {
    fn size(&self) -> Option<u64> {
        Some(self.data.len() as u64)
    }

    async fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let k = out.len().min(self.data.len());
        out[..k].copy_from_slice(&self.data.split_to(k));
        Ok(k)
    }
}

/// A file read in netascii (RFC 1350 / RFC 764): LF becomes CR LF and a
/// bare CR becomes CR NUL. Its size on the wire is unknown up front, so it
/// answers no `tsize`.
pub struct Netascii {
    inner: Box<dyn FileHandle>,
    raw: Vec<u8>,
    pos: usize,
    eof: bool,
    /// Second byte of a pair that did not fit in the last read.
    pending: Option<u8>,
}

impl Netascii {
    pub fn new(inner: Box<dyn FileHandle>) -> Netascii {
        Netascii {
            inner,
            raw: Vec::new(),
            pos: 0,
            eof: false,
            pending: None,
        }
    }
}

#[async_trait]
impl FileHandle for Netascii {
    fn size(&self) -> Option<u64> {
        None
    }

    async fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        const RAW: usize = 4096;
        let mut n = 0;
        while n < out.len() {
            if let Some(b) = self.pending.take() {
                out[n] = b;
                n += 1;
                continue;
            }
            let Some(&b) = self.raw.get(self.pos) else {
                if self.eof {
                    break;
                }
                self.raw.resize(RAW, 0);
                let k = self.inner.read(&mut self.raw).await?;
                self.raw.truncate(k);
                self.pos = 0;
                self.eof = k < RAW;
                continue;
            };
            self.pos += 1;
            let (first, second) = match b {
                b'\n' => (b'\r', Some(b'\n')),
                b'\r' => (b'\r', Some(0)),
                other => (other, None),
            };
            out[n] = first;
            n += 1;
            self.pending = second;
        }
        Ok(n)
    }
}

/// `upper` first, then `lower` when `upper` does not have the file.
pub struct Overlay {
    pub upper: Arc<dyn FileSource>,
    pub lower: Arc<dyn FileSource>,
}

#[async_trait]
impl FileSource for Overlay {
    async fn open(&self, name: &str) -> Result<Box<dyn FileHandle>, SourceError> {
        match self.upper.open(name).await {
            Err(SourceError::NotFound) => self.lower.open(name).await,
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(src: &dyn FileSource, name: &str) -> Result<Vec<u8>, SourceError> {
        let mut h = src.open(name).await?;
        let mut all = Vec::new();
        let mut buf = vec![0u8; 1000];
        loop {
            let n = h.read(&mut buf).await.map_err(SourceError::Io)?;
            all.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                return Ok(all);
            }
        }
    }

    #[test]
    fn sanitize_refuses_escapes() {
        for bad in [
            "",
            "/",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/..",
            "..",
            "a\\..\\x",
            "C:\\x",
            "a\0b",
            "a\nb",
            "./",
        ] {
            assert!(
                matches!(sanitize(bad), Err(SourceError::Forbidden)),
                "{bad:?}"
            );
        }
        assert_eq!(sanitize("a//b/./c").unwrap(), vec!["a", "b", "c"]);
        assert_eq!(sanitize("ipxe.efi").unwrap(), vec!["ipxe.efi"]);
        assert_eq!(sanitize("..a/b..").unwrap(), vec!["..a", "b.."]);
    }

    #[tokio::test]
    async fn dir_source_serves_files_in_chunks_and_stays_inside() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s3cret").unwrap();
        let root = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..(CHUNK * 3 + 17)).map(|i| (i % 251) as u8).collect();
        std::fs::write(root.path().join("big.bin"), &big).unwrap();
        std::fs::create_dir(root.path().join("sub")).unwrap();
        std::fs::write(root.path().join("sub/a"), b"a").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("escape"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("escdir")).unwrap();
        std::os::unix::fs::symlink("sub/a", root.path().join("inside")).unwrap();
        let src = DirSource::new(root.path()).unwrap();

        assert_eq!(read_all(&src, "big.bin").await.unwrap(), big);
        assert_eq!(read_all(&src, "sub//a").await.unwrap(), b"a");
        assert_eq!(read_all(&src, "inside").await.unwrap(), b"a");
        assert!(matches!(
            read_all(&src, "escape").await,
            Err(SourceError::Forbidden)
        ));
        assert!(matches!(
            read_all(&src, "escdir/secret").await,
            Err(SourceError::Forbidden)
        ));
        assert!(matches!(
            read_all(&src, "missing").await,
            Err(SourceError::NotFound)
        ));
        assert!(matches!(
            read_all(&src, "sub").await,
            Err(SourceError::NotFound)
        ));
        let h = src.open("big.bin").await.unwrap();
        assert_eq!(h.size(), Some(big.len() as u64));
    }

    #[tokio::test]
    async fn netascii_translates_line_ends_across_reads() {
        let text = b"a\nb\rc\r\n".repeat(3000);
        let want: Vec<u8> = text
            .iter()
            .flat_map(|&b| match b {
                b'\n' => vec![b'\r', b'\n'],
                b'\r' => vec![b'\r', 0],
                o => vec![o],
            })
            .collect();
        for chunk in [1usize, 2, 3, 512, 5000] {
            let mem = MemorySource::new();
            mem.insert("t", text.clone());
            let mut h = Netascii::new(mem.open("t").await.unwrap());
            assert_eq!(h.size(), None);
            let mut got = Vec::new();
            let mut buf = vec![0u8; chunk];
            loop {
                let n = h.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
                if n < chunk {
                    break;
                }
            }
            assert_eq!(got, want, "chunk {chunk}");
        }
    }

    #[tokio::test]
    async fn memory_files_overlay_a_directory() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("disk"), b"disk").unwrap();
        let mem = MemorySource::new();
        mem.insert("virtual/boot.ipxe", &b"#!ipxe\n"[..]);
        let src = Overlay {
            upper: Arc::new(mem),
            lower: Arc::new(DirSource::new(root.path()).unwrap()),
        };
        assert_eq!(
            read_all(&src, "virtual//boot.ipxe").await.unwrap(),
            b"#!ipxe\n"
        );
        assert_eq!(read_all(&src, "disk").await.unwrap(), b"disk");
        assert!(matches!(
            read_all(&src, "../disk").await,
            Err(SourceError::Forbidden)
        ));
    }
}
