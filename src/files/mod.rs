//! Read-only file serving shared by the boot services: one file source
//! with one path check for TFTP and the boot HTTP server's `/assets/`, and
//! the OS image cache beside it. Knows nothing of TFTP packets or HTTP;
//! imports neither `tftp`, `http` nor `controller`.
//!
//! - [`source`]: files by name under a root ([`DirSource`]), in memory
//!   ([`MemorySource`]) or layered ([`Overlay`]); the one path check,
//!   [`sanitize`];
//! - [`cache`]: MachineClass artifacts downloaded once, verified by digest,
//!   served from disk;
//! - [`chunks`]: a byte range of an open file as a stream of large chunks,
//!   read one ahead on the blocking pool (how boot HTTP sends large files);
//! - [`checksums`]: digests read from a distribution's checksum file.

pub mod cache;
pub mod checksums;
pub mod chunks;
pub mod source;

pub use cache::{CacheError, ImageCache};
pub use chunks::FileChunks;
pub use source::{
    DirSource, FileHandle, FileSource, MemorySource, Opened, Overlay, SourceError, memory_file,
    sanitize,
};
