//! Story: a rack pulls OS images over boot HTTP at the machine's limit. What
//! once capped it was the way a large file went out, not CPU: small pieces
//! each behind a blocking-pool round trip and an extra copy, with the next
//! read started only when hyper asked for it. These tests hold the
//! mechanism through the production send path (`send_file::serve`, the
//! function the `/assets/` and `/images/` handlers call), not a time: the
//! body of a file larger than the memory cache limit comes in pieces of
//! exactly [`send_file::CHUNK`] bytes (only the last one shorter), with a
//! Range from an odd offset too, the completion callback sees every byte,
//! and the body never waits on a timer (the test runs on a paused clock,
//! which any sleep or interval on the way would move).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt;
use metalherd::files::source::CACHE_FILE_MAX;
use metalherd::files::{DirSource, Opened};
use metalherd::http::boot::send_file::{self, CHUNK, Source};

/// A file above the memory cache limit, so the asset handler takes the
/// disk path for it, not a multiple of the chunk size.
fn large_file(dir: &std::path::Path) -> Vec<u8> {
    let len = usize::try_from(CACHE_FILE_MAX).unwrap() + 3 * CHUNK + 12_345;
    let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    let mut f = std::fs::File::create(dir.join("image.bin")).unwrap();
    f.write_all(&data).unwrap();
    data
}

struct Sent {
    status: StatusCode,
    frames: Vec<usize>,
    body: Vec<u8>,
    done: Option<(u64, bool)>,
}

/// Open `image.bin` the way the asset handler does and send it, counting
/// the body's frames and their sizes.
async fn send(dir: &std::path::Path, headers: HeaderMap) -> Sent {
    let src = DirSource::new(dir).unwrap();
    let (opened, meta) = src.open_whole("image.bin").await.unwrap();
    let Opened::Disk(file) = opened else {
        panic!("a file above the cache limit must be read from disk");
    };
    let done = Arc::new(Mutex::new(None));
    let record = done.clone();
    let served = send_file::serve(
        Source::File(file, meta),
        &Method::GET,
        &headers,
        None,
        "application/octet-stream",
        Some(Box::new(move |n, complete| {
            *record.lock().unwrap() = Some((n, complete));
        })),
    )
    .await
    .unwrap();
    let mut body = served.response.into_body();
    let mut frames = Vec::new();
    let mut all = Vec::new();
    while let Some(frame) = body.frame().await {
        let data = frame.unwrap().into_data().unwrap();
        frames.push(data.len());
        all.extend_from_slice(&data);
    }
    drop(body);
    let done = *done.lock().unwrap();
    Sent {
        status: served.status,
        frames,
        body: all,
        done,
    }
}

/// Every frame but the last is exactly one chunk, and there are as many
/// as the length needs, no more.
fn assert_whole_chunks(frames: &[usize], len: usize) {
    let (last, rest) = frames.split_last().expect("a body");
    assert!(
        rest.iter().all(|&n| n == CHUNK),
        "pieces smaller than the {CHUNK}-byte chunk: {frames:?}"
    );
    assert!(*last > 0 && *last <= CHUNK, "{frames:?}");
    assert_eq!(frames.len(), len.div_ceil(CHUNK), "{frames:?}");
}

#[tokio::test(start_paused = true)]
async fn a_large_image_goes_out_in_whole_chunks_and_never_waits_on_a_timer() {
    let dir = tempfile::tempdir().unwrap();
    let data = large_file(dir.path());
    let t0 = tokio::time::Instant::now();

    let sent = send(dir.path(), HeaderMap::new()).await;

    assert_eq!(
        tokio::time::Instant::now(),
        t0,
        "sending the body moved the paused clock: it waited on a timer"
    );
    assert_eq!(sent.status, StatusCode::OK);
    assert_whole_chunks(&sent.frames, data.len());
    assert!(sent.body == data, "the body differs from the file");
    assert_eq!(sent.done, Some((data.len() as u64, true)));
}

#[tokio::test(start_paused = true)]
async fn a_range_from_an_odd_offset_also_goes_out_in_whole_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let data = large_file(dir.path());
    let from = CHUNK + 1;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::RANGE,
        HeaderValue::from_str(&format!("bytes={from}-")).unwrap(),
    );
    let t0 = tokio::time::Instant::now();

    let sent = send(dir.path(), headers).await;

    assert_eq!(
        tokio::time::Instant::now(),
        t0,
        "the body waited on a timer"
    );
    assert_eq!(sent.status, StatusCode::PARTIAL_CONTENT);
    assert_whole_chunks(&sent.frames, data.len() - from);
    assert!(sent.body == data[from..], "the range differs from the file");
    assert_eq!(sent.done, Some(((data.len() - from) as u64, true)));
}
