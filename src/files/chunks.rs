//! A byte range of an open file as a stream of large chunks, read on the
//! blocking pool one chunk ahead of the consumer. Owns only the reading:
//! what to send, and over what, is the caller's (boot HTTP turns the stream
//! into a response body). No sockets, no HTTP here.
//!
//! Why not `tokio::fs::File` behind a `ReaderStream`: tokio's file does one
//! blocking-pool round trip per `poll_read`, reads into a buffer of its own
//! and copies from there into the reader's, and only starts the next read
//! when the consumer asks for it; so the socket idles while the disk is
//! read and the disk idles while the socket is written. Here each chunk is
//! read straight into the buffer that is sent (one copy from the page
//! cache, none after), and the next chunk is being read while the current
//! one is written.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use tokio::task::JoinHandle;

/// `count` bytes of a file from `start`, as chunks of `chunk` bytes (the
/// last one shorter). A file that turns out shorter than `start + count`
/// ends the stream early, after what there was; the consumer compares what
/// it got with what it expected.
pub struct FileChunks {
    state: State,
    /// Bytes of the range not yet asked of the disk.
    unread: u64,
    chunk: usize,
}

enum State {
    /// Nothing read yet: the file, and where to seek first.
    Start(File, u64),
    /// A chunk being read on the blocking pool; the file comes back with it.
    Reading(JoinHandle<io::Result<(File, Bytes)>>),
    /// The range is read (or the file ended, or a read failed).
    Done,
}

impl FileChunks {
    /// Read lazily: nothing happens until the stream is first polled (so a
    /// response that is never sent reads nothing).
    pub fn new(file: File, start: u64, count: u64, chunk: usize) -> FileChunks {
        FileChunks {
            state: if count == 0 {
                State::Done
            } else {
                State::Start(file, start)
            },
            unread: count,
            chunk: chunk.max(1),
        }
    }

    /// Start reading the next chunk of the range on the blocking pool.
    fn read_next(&mut self, file: File, seek_to: Option<u64>) -> State {
        let want = self.unread.min(self.chunk as u64);
        self.unread -= want;
        State::Reading(tokio::task::spawn_blocking(move || {
            read_chunk(file, seek_to, want)
        }))
    }
}

/// Read `want` bytes at the file's position (after seeking to `seek_to`)
/// into a buffer of exactly that size, fewer only at the end of the file.
fn read_chunk(mut file: File, seek_to: Option<u64>, want: u64) -> io::Result<(File, Bytes)> {
    if let Some(at) = seek_to {
        file.seek(SeekFrom::Start(at))?;
    }
    let cap = usize::try_from(want).map_err(io::Error::other)?;
    // `read_to_end` reads into the vector's spare capacity as it is, with
    // no zeroing first, and retries short reads and EINTR; `take` stops it
    // at `want` without a read past the chunk.
    let mut buf = Vec::with_capacity(cap);
    (&file).take(want).read_to_end(&mut buf)?;
    Ok((file, Bytes::from(buf)))
}

impl Stream for FileChunks {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            match std::mem::replace(&mut this.state, State::Done) {
                State::Done => return Poll::Ready(None),
                State::Start(file, at) => {
                    this.state = this.read_next(file, Some(at));
                }
                State::Reading(mut job) => {
                    let res = match Pin::new(&mut job).poll(cx) {
                        Poll::Pending => {
                            this.state = State::Reading(job);
                            return Poll::Pending;
                        }
                        Poll::Ready(res) => res,
                    };
                    let (file, data) = match res.map_err(io::Error::other) {
                        Ok(Ok(read)) => read,
                        Ok(Err(e)) | Err(e) => return Poll::Ready(Some(Err(e))),
                    };
                    if this.unread > 0 && data.len() == this.chunk {
                        // Read ahead: the next chunk comes off the disk
                        // while this one goes out.
                        this.state = this.read_next(file, None);
                    }
                    // A short chunk before the end of the range: the file
                    // shrank; what was read goes out, then the stream ends.
                    if data.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(data)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::io::Write;

    fn file_of(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&data).unwrap();
        (f, data)
    }

    async fn collect(s: FileChunks) -> (Vec<usize>, Vec<u8>) {
        let mut sizes = Vec::new();
        let mut all = Vec::new();
        let mut s = s;
        while let Some(c) = s.next().await {
            let c = c.unwrap();
            sizes.push(c.len());
            all.extend_from_slice(&c);
        }
        (sizes, all)
    }

    #[tokio::test]
    async fn a_range_comes_in_whole_chunks_and_a_short_last_one() {
        let (f, data) = file_of(10_000);
        let file = File::open(f.path()).unwrap();
        let (sizes, got) = collect(FileChunks::new(file, 1001, 8000, 3000)).await;
        assert_eq!(sizes, [3000, 3000, 2000]);
        assert_eq!(got, &data[1001..9001]);
    }

    #[tokio::test]
    async fn a_file_shorter_than_the_range_ends_after_what_there_is() {
        let (f, data) = file_of(5000);
        let file = File::open(f.path()).unwrap();
        let (sizes, got) = collect(FileChunks::new(file, 0, 9000, 2000)).await;
        assert_eq!(sizes, [2000, 2000, 1000]);
        assert_eq!(got, data);
    }

    #[tokio::test]
    async fn an_empty_range_reads_nothing() {
        let (f, _) = file_of(10);
        let file = File::open(f.path()).unwrap();
        let (sizes, _) = collect(FileChunks::new(file, 3, 0, 2000)).await;
        assert!(sizes.is_empty());
    }
}
