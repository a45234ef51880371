//! Sending one opened file over HTTP: HEAD, a single Range, ETag with
//! If-None-Match / If-Range, streamed in [`CHUNK`]-sized pieces read one
//! ahead on the blocking pool ([`FileChunks`]; a file is never read whole
//! into memory). Which file may be
//! opened is decided before, by the shared file source ([`crate::files`]). A completion callback
//! learns how many bytes went out and whether the body finished, so the
//! caller can record the boot step and count the transfer.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::Stream;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};

use super::range::{self, RangeDecision};
use crate::files::FileChunks;

/// Size of each body piece of a file sent from disk, and of each read
/// behind it. Each piece is read straight into the buffer hyper writes
/// (one copy from the page cache), and the next one is read meanwhile.
/// 256 KiB keeps the piece being read and the piece being written within
/// one core's L2 cache (1 MiB here), so the socket copy reads from cache; at
/// most about three pieces per connection are in memory (one being
/// written, one queued, one being read).
pub const CHUNK: usize = 256 * 1024;

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
    /// An open file with its metadata, streamed in [`CHUNK`]-sized pieces.
    File(std::fs::File, std::fs::Metadata),
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
        Source::File(_, meta) | Source::Memory(_, meta) => meta.clone(),
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
        Source::File(file, _) => {
            let chunks = FileChunks::new(file, start, count, CHUNK);
            Body::from_stream(Tracked::new(chunks, count, on_done))
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
}

impl<S> Tracked<S> {
    fn new(inner: S, expected: u64, on_done: Option<OnDone>) -> Tracked<S> {
        Tracked {
            inner,
            sent: 0,
            expected,
            on_done,
        }
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
