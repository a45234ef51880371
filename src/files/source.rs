//! Where boot files come from: the [`FileSource`] trait, a read-only
//! directory ([`DirSource`]) in which no request can reach outside the root
//! (no `..`, absolute paths, hidden names, backslashes, NULs, or symlinks
//! leading out), in-memory virtual files ([`MemorySource`]) and an
//! [`Overlay`] of two sources. TFTP reads through [`FileSource::open`];
//! boot HTTP, which needs to seek for Range requests, opens the same
//! checked file with [`DirSource::open_file`]. Small files (boot loaders like ipxe.efi, read by every
//! machine of a boot storm) are read whole once and served from memory
//! while they stay unchanged; larger ones are read in chunks, never whole.
//! Knows nothing of TFTP or HTTP; error messages never carry server paths.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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

    /// The next `scratch.len()` bytes (fewer only at the end of the file),
    /// read into `scratch`, or borrowed without a copy when the file is
    /// already in memory.
    async fn next<'a>(&'a mut self, scratch: &'a mut [u8]) -> std::io::Result<&'a [u8]> {
        let n = self.read(scratch).await?;
        Ok(scratch.get(..n).unwrap_or_default())
    }
}

/// Read-only files by name, as a TFTP client asks for them.
#[async_trait]
pub trait FileSource: Send + Sync {
    async fn open(&self, name: &str) -> Result<Box<dyn FileHandle>, SourceError>;

    /// Open `name` for a client at `peer`: sources whose answer depends on
    /// who asks (a machine's own boot configuration) override this.
    async fn open_for(
        &self,
        name: &str,
        _peer: std::net::SocketAddr,
    ) -> Result<Box<dyn FileHandle>, SourceError> {
        self.open(name).await
    }
}

/// A file handle over bytes in memory (a generated configuration).
pub fn memory_file(data: impl Into<Bytes>) -> Box<dyn FileHandle> {
    Box::new(MemFile {
        data: data.into(),
        last: Bytes::new(),
    })
}

/// Longest name accepted, in bytes.
pub const NAME_MAX: usize = 1024;

/// The one path check of every file source: split a requested name into
/// safe relative components, or refuse it. Allowed: `a/b/c`, `./a` and
/// repeated slashes inside. Refused: empty names, names over [`NAME_MAX`]
/// bytes, absolute paths, `..`, hidden names (a component starting with
/// `.`), backslashes, NUL and other control bytes.
pub fn sanitize(name: &str) -> Result<Vec<&str>, SourceError> {
    if name.is_empty()
        || name.len() > NAME_MAX
        || name.starts_with('/')
        || name.bytes().any(|b| b == b'\\' || b < 0x20 || b == 0x7f)
    {
        return Err(SourceError::Forbidden);
    }
    let mut parts = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            p if p.starts_with('.') => return Err(SourceError::Forbidden),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(SourceError::Forbidden);
    }
    Ok(parts)
}

/// Files up to this size are kept in memory after their first read.
pub const CACHE_FILE_MAX: u64 = 8 << 20;
/// Bytes of file contents kept in memory at most, over all files.
const CACHE_TOTAL_MAX: u64 = 64 << 20;

/// Serves regular files under a root directory.
pub struct DirSource {
    root: PathBuf,
    cache: Arc<Mutex<Cache>>,
}

/// How long [`DirSource::open_whole`] answers a small file from memory
/// without looking at the disk again (as nginx's `open_file_cache_valid`):
/// a file replaced, changed or removed is seen at most this late. Within
/// the window a request costs no system call and no blocking-pool hop.
pub const REVALIDATE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Names answered within [`REVALIDATE_AFTER`] kept at most (request names,
/// so differently spelled names of one file count apart).
const FRESH_MAX: usize = 1024;

/// Contents of small files by canonical path, each valid only while the
/// file on disk has the same device, inode, size and modification time (a
/// file replaced or rewritten is read again).
#[derive(Default)]
struct Cache {
    max_file: u64,
    total: u64,
    files: HashMap<PathBuf, Cached>,
    /// Request names checked against the disk lately, with what they gave.
    fresh: HashMap<String, Fresh>,
}

struct Fresh {
    checked: std::time::Instant,
    data: Bytes,
    meta: std::fs::Metadata,
}

struct Cached {
    id: FileId,
    data: Bytes,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl FileId {
    fn of(m: &std::fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
        }
    }
}

impl DirSource {
    /// The root must exist; it is canonicalized once here. Files up to
    /// [`CACHE_FILE_MAX`] bytes are cached in memory.
    pub fn new(root: &Path) -> std::io::Result<DirSource> {
        DirSource::with_cache_limit(root, CACHE_FILE_MAX)
    }

    /// Like [`DirSource::new`], caching files up to `max_file` bytes (0:
    /// none).
    pub fn with_cache_limit(root: &Path, max_file: u64) -> std::io::Result<DirSource> {
        Ok(DirSource {
            root: root.canonicalize()?,
            cache: Arc::new(Mutex::new(Cache {
                max_file,
                ..Cache::default()
            })),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Open `name` after the same checks as [`FileSource::open`], whole:
    /// a small file's contents from the memory cache (read and kept on
    /// first use, as for TFTP), a larger one as an open file to seek in
    /// (HTTP Range requests), each with the opened file's metadata.
    pub async fn open_whole(&self, name: &str) -> Result<(Opened, std::fs::Metadata), SourceError> {
        sanitize(name)?;
        if let Ok(c) = self.cache.lock()
            && let Some(f) = c.fresh.get(name)
            && f.checked.elapsed() < REVALIDATE_AFTER
        {
            return Ok((Opened::Memory(f.data.clone()), f.meta.clone()));
        }
        let root = self.root.clone();
        let name = name.to_string();
        let cache = self.cache.clone();
        tokio::task::spawn_blocking(move || {
            let checked = std::time::Instant::now();
            let r = open_cached(&root, &name, &cache);
            remember(&cache, name, checked, &r);
            r
        })
        .await
        .map_err(|e| SourceError::Io(std::io::Error::other(e)))?
    }

    /// Open `name` after the same checks as [`FileSource::open`], without
    /// the memory cache: for servers that seek (HTTP Range requests).
    /// Only regular files open.
    pub async fn open_file(
        &self,
        name: &str,
    ) -> Result<(std::fs::File, std::fs::Metadata), SourceError> {
        sanitize(name)?;
        let root = self.root.clone();
        let name = name.to_string();
        tokio::task::spawn_blocking(move || open_regular(&resolve(&root, &name)?))
            .await
            .map_err(|e| SourceError::Io(std::io::Error::other(e)))?
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

fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), SourceError> {
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
    Ok((f, meta))
}

/// What an open finds: a file to read in chunks, or contents in memory.
pub enum Opened {
    Disk(std::fs::File),
    Memory(Bytes),
}

/// Keep what a disk check of `name` gave (a small file's contents) for
/// [`REVALIDATE_AFTER`]; anything else forgets the name.
fn remember(
    cache: &Mutex<Cache>,
    name: String,
    checked: std::time::Instant,
    r: &Result<(Opened, std::fs::Metadata), SourceError>,
) {
    let Ok(mut c) = cache.lock() else { return };
    match r {
        Ok((Opened::Memory(data), meta)) => {
            if c.fresh.len() >= FRESH_MAX && !c.fresh.contains_key(&name) {
                c.fresh.clear();
            }
            c.fresh.insert(
                name,
                Fresh {
                    checked,
                    data: data.clone(),
                    meta: meta.clone(),
                },
            );
        }
        _ => {
            c.fresh.remove(&name);
        }
    }
}

/// Open `name` under `root` (blocking), answering from `cache` when the
/// file is small and unchanged, and filling it when it is small and new.
/// The metadata is the opened file's.
fn open_cached(
    root: &Path,
    name: &str,
    cache: &Mutex<Cache>,
) -> Result<(Opened, std::fs::Metadata), SourceError> {
    let path = resolve(root, name)?;
    let (mut file, meta) = open_regular(&path)?;
    let id = FileId::of(&meta);
    let max_file = match cache.lock() {
        Ok(c) => {
            if let Some(hit) = c.files.get(&path).filter(|h| h.id == id) {
                return Ok((Opened::Memory(hit.data.clone()), meta));
            }
            c.max_file
        }
        Err(_) => 0,
    };
    if id.len > max_file {
        return Ok((Opened::Disk(file), meta));
    }
    let mut data = Vec::with_capacity(id.len as usize);
    file.read_to_end(&mut data).map_err(SourceError::Io)?;
    if data.len() as u64 != id.len {
        // Changed while being read: serve what was read, keep nothing.
        return Ok((Opened::Memory(data.into()), meta));
    }
    let data = Bytes::from(data);
    if let Ok(mut c) = cache.lock() {
        if let Some(old) = c.files.remove(&path) {
            c.total -= old.data.len() as u64;
        }
        if c.total + id.len > CACHE_TOTAL_MAX {
            // Boot assets are a handful of files: when they do not fit,
            // start over rather than track recency.
            c.files.clear();
            c.total = 0;
        }
        c.total += id.len;
        c.files.insert(
            path,
            Cached {
                id,
                data: data.clone(),
            },
        );
    }
    Ok((Opened::Memory(data), meta))
}

#[async_trait]
impl FileSource for DirSource {
    async fn open(&self, name: &str) -> Result<Box<dyn FileHandle>, SourceError> {
        // Refuse bad names before any file system call.
        sanitize(name)?;
        let root = self.root.clone();
        let name = name.to_string();
        let cache = self.cache.clone();
        let (opened, meta) = tokio::task::spawn_blocking(move || open_cached(&root, &name, &cache))
            .await
            .map_err(|e| SourceError::Io(std::io::Error::other(e)))??;
        Ok(match opened {
            Opened::Memory(data) => Box::new(MemFile {
                data,
                last: Bytes::new(),
            }),
            Opened::Disk(file) => Box::new(DirFile {
                file: Some(file),
                size: meta.len(),
                buf: Vec::new(),
                pos: 0,
                eof: false,
            }),
        })
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
        Ok(Box::new(MemFile {
            data,
            last: Bytes::new(),
        }))
    }
}

struct MemFile {
    data: Bytes,
    /// The block [`FileHandle::next`] returned last.
    last: Bytes,
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

    async fn next<'a>(&'a mut self, scratch: &'a mut [u8]) -> std::io::Result<&'a [u8]> {
        // Cut the front off the shared buffer: no copy.
        let k = scratch.len().min(self.data.len());
        self.last = self.data.split_to(k);
        Ok(&self.last)
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
mod tests;
