//! Sending one opened file over HTTP: HEAD, a single Range, ETag with
//! If-None-Match / If-Range, streamed in pieces ([`CHUNK`], or
//! [`LONE_CHUNK`] while few files stream at once) read one ahead on the
//! blocking pool ([`FileChunks`]; a file is never read whole
//! into memory). Which file may be
//! opened is decided before, by the shared file source ([`crate::files`]). A completion callback
//! learns how many bytes went out and whether the body finished, so the
//! caller can record the boot step and count the transfer.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::Stream;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};

use super::range::{self, RangeDecision};
use crate::files::FileChunks;

/// Size of each body piece of a file sent from disk, and of each read
/// behind it, while more than [`FEW_STREAMS`] files stream at once. Each
/// piece is read straight into the buffer hyper writes (one copy from the
/// page cache), and the next one is read meanwhile. 256 KiB keeps the
/// pieces being read and written by many connections near the cores' L2
/// caches (1 MiB each here), so the socket copies read from cache; at most
/// about three pieces per connection are in memory (one being written, one
/// queued, one being read).
pub const CHUNK: usize = 256 * 1024;

/// The piece size while at most [`FEW_STREAMS`] files stream at once (a
/// single reimage, a rack's first server): a quarter of the blocking-pool
/// round trips and socket wake-ups per byte, which is what limits one
/// connection, and still at most about 3 MiB per stream in memory. Measured
/// on one connection: 1,571 MiB/s with 1 MiB pieces against 1,176 with
/// 256 KiB; with 64 connections 1 MiB pieces lost (1,589 against 2,046),
/// hence the switch by concurrency (BENCHMARKS.md, "HTTP boot").
pub const LONE_CHUNK: usize = 1024 * 1024;

/// Up to this many file bodies in flight (the new one included) get
/// [`LONE_CHUNK`] pieces; beyond, [`CHUNK`].
pub const FEW_STREAMS: usize = 2;

/// How many file bodies are streaming from disk, shared by one server's
/// handlers: what picks the piece size of the next one.
#[derive(Clone, Debug, Default)]
pub struct Streams(Arc<AtomicUsize>);

/// One body's place in [`Streams`], given back when the body is dropped.
pub struct StreamSlot(Arc<AtomicUsize>);

impl Streams {
    /// Count a new body in; its piece size follows from how many are in
    /// flight with it.
    pub fn enter(&self) -> (StreamSlot, usize) {
        let now = self.0.fetch_add(1, Ordering::Relaxed) + 1;
        (StreamSlot(self.0.clone()), piece_size(now))
    }

    /// Bodies in flight now.
    pub fn in_flight(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The piece size for a body streamed with `in_flight - 1` others.
pub fn piece_size(in_flight: usize) -> usize {
    if in_flight <= FEW_STREAMS {
        LONE_CHUNK
    } else {
        CHUNK
    }
}

/// Called once when a body ends: `(bytes sent, completed)`.
pub type OnDone = Box<dyn FnOnce(u64, bool) + Send + 'static>;

/// An ETag from size and modification time (cheap, changes when the file does).
pub fn etag_of(meta: &std::fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("\"{:x}-{:x}\"", meta.len(), mtime)
}

/// Why a file could not be served.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("not found")]
    NotFound,
    #[error("reading the file: {0}")]
    Io(#[from] std::io::Error),
}

/// What `serve` sent, for logging.
pub struct Served {
    pub response: Response,
    pub status: StatusCode,
}

/// Where a body's bytes come from.
pub enum Source {
    /// An open file with its metadata, streamed in pieces of the size
    /// [`Streams::enter`] gives it.
    File(std::fs::File, std::fs::Metadata, Streams),
    /// The whole contents, already in memory (small files from the shared
    /// file source's cache), with the metadata they were read at.
    Memory(Bytes, std::fs::Metadata),
}

/// Send a file for a GET or HEAD. `etag` overrides the size/mtime ETag
/// (content-addressed images use their digest). `on_done` fires when a
/// body finishes or is dropped early; it is not called for HEAD, 304 or 416.
pub async fn serve(
    source: Source,
    method: &Method,
    headers: &HeaderMap,
    etag: Option<String>,
    content_type: &'static str,
    on_done: Option<OnDone>,
) -> Result<Served, FileError> {
    let meta = match &source {
        Source::File(_, meta, _) | Source::Memory(_, meta) => meta.clone(),
    };
    if !meta.is_file() {
        return Err(FileError::NotFound);
    }
    let len = meta.len();
    let etag = etag.unwrap_or_else(|| etag_of(&meta));
    let hv = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static(""));
    let mut out = HeaderMap::new();
    out.insert(header::ETAG, hv(&etag));
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    out.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));

    let text = |h: header::HeaderName| headers.get(h).and_then(|v| v.to_str().ok());
    if let Some(inm) = text(header::IF_NONE_MATCH)
        && range::none_match(inm, &etag)
    {
        return Ok(Served {
            response: (StatusCode::NOT_MODIFIED, out).into_response(),
            status: StatusCode::NOT_MODIFIED,
        });
    }
    let decision = if range::if_range_ok(text(header::IF_RANGE), &etag) {
        range::decide(text(header::RANGE), len)
    } else {
        RangeDecision::Full
    };
    let (status, start, count) = match decision {
        RangeDecision::Full => (StatusCode::OK, 0, len),
        RangeDecision::Partial { start, end } => {
            out.insert(
                header::CONTENT_RANGE,
                hv(&format!("bytes {start}-{end}/{len}")),
            );
            (StatusCode::PARTIAL_CONTENT, start, end - start + 1)
        }
        RangeDecision::Unsatisfiable => {
            out.insert(header::CONTENT_RANGE, hv(&format!("bytes */{len}")));
            return Ok(Served {
                response: (StatusCode::RANGE_NOT_SATISFIABLE, out).into_response(),
                status: StatusCode::RANGE_NOT_SATISFIABLE,
            });
        }
    };
    out.insert(header::CONTENT_LENGTH, hv(&count.to_string()));
    if method == Method::HEAD {
        return Ok(Served {
            response: (status, out).into_response(),
            status,
        });
    }
    let body = match source {
        Source::File(file, _, streams) => {
            let (slot, piece) = streams.enter();
            let chunks = FileChunks::new(file, start, count, piece);
            Body::from_stream(Tracked::new(chunks, count, on_done).holding(slot))
        }
        Source::Memory(data, _) => {
            // The file may have changed since its metadata was read: send
            // what there is and let a short body end as incomplete.
            let from = usize::try_from(start).unwrap_or(usize::MAX).min(data.len());
            let to = usize::try_from(start + count)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let chunk = futures::stream::iter([Ok(data.slice(from..to))]);
            Body::from_stream(Tracked::new(chunk, count, on_done))
        }
    };
    Ok(Served {
        response: (status, out, body).into_response(),
        status,
    })
}

/// A body stream that reports its end (or its early drop) once.
struct Tracked<S> {
    inner: S,
    sent: u64,
    expected: u64,
    on_done: Option<OnDone>,
    /// Counted in [`Streams`] until the body is dropped.
    _slot: Option<StreamSlot>,
}

impl<S> Tracked<S> {
    fn new(inner: S, expected: u64, on_done: Option<OnDone>) -> Tracked<S> {
        Tracked {
            inner,
            sent: 0,
            expected,
            on_done,
            _slot: None,
        }
    }

    fn holding(mut self, slot: StreamSlot) -> Tracked<S> {
        self._slot = Some(slot);
        self
    }

    fn finish(&mut self, complete: bool) {
        if let Some(f) = self.on_done.take() {
            f(self.sent, complete);
        }
    }
}

impl<S: Stream<Item = std::io::Result<Bytes>> + Unpin> Stream for Tracked<S> {
    type Item = std::io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(b))) => {
                this.sent += b.len() as u64;
                // hyper may stop polling once Content-Length bytes are out,
                // so the last chunk, not the end of the stream, completes it.
                if this.sent == this.expected {
                    this.finish(true);
                }
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish(false);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                // A file that shrank while being sent ends short: not complete.
                let complete = this.sent == this.expected;
                this.finish(complete);
                if complete {
                    Poll::Ready(None)
                } else {
                    Poll::Ready(Some(Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "file shorter than announced",
                    ))))
                }
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S> Drop for Tracked<S> {
    fn drop(&mut self) {
        self.finish(false);
    }
}
