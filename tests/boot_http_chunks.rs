//! Story: a rack pulls OS images over boot HTTP at the machine's limit. What
//! once capped it was the way a large file went out, not CPU: small pieces
//! each behind a blocking-pool round trip and an extra copy, with the next
//! read started only when hyper asked for it. These tests hold the
//! mechanism through the production send path (`send_file::serve`, the
//! function the `/assets/` and `/images/` handlers call), not a time: the
//! body of a file larger than the memory cache limit comes in pieces of
//! exactly the piece size (only the last one shorter): [`LONE_CHUNK`] while
//! it streams alone or with few others, [`CHUNK`] once more than
//! [`FEW_STREAMS`] stream at once, and back to [`LONE_CHUNK`] when they
//! end. A Range from an odd offset too; the completion callback sees every
//! byte, and the body never waits on a timer (the test runs on a paused
//! clock, which any sleep or interval on the way would move).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt;
use metalherd::files::source::CACHE_FILE_MAX;
use metalherd::files::{DirSource, Opened};
use metalherd::http::boot::send_file::{self, CHUNK, FEW_STREAMS, LONE_CHUNK, Source, Streams};

/// A file above the memory cache limit, so the asset handler takes the
/// disk path for it, not a multiple of either piece size.
fn large_file(dir: &std::path::Path) -> Vec<u8> {
    let len = usize::try_from(CACHE_FILE_MAX).unwrap() + 3 * LONE_CHUNK + 12_345;
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
async fn send(dir: &std::path::Path, headers: HeaderMap, streams: &Streams) -> Sent {
    let src = DirSource::new(dir).unwrap();
    let (opened, meta) = src.open_whole("image.bin").await.unwrap();
    let Opened::Disk(file) = opened else {
        panic!("a file above the cache limit must be read from disk");
    };
    let done = Arc::new(Mutex::new(None));
    let record = done.clone();
    let served = send_file::serve(
        Source::File(file, meta, streams.clone()),
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

/// Every frame but the last is exactly one `piece`, and there are as many
/// as the length needs, no more.
fn assert_whole_pieces(frames: &[usize], len: usize, piece: usize) {
    let (last, rest) = frames.split_last().expect("a body");
    assert!(
        rest.iter().all(|&n| n == piece),
        "pieces other than the {piece}-byte piece: {frames:?}"
    );
    assert!(*last > 0 && *last <= piece, "{frames:?}");
    assert_eq!(frames.len(), len.div_ceil(piece), "{frames:?}");
}

#[tokio::test(start_paused = true)]
async fn a_large_image_goes_out_in_whole_chunks_and_never_waits_on_a_timer() {
    let dir = tempfile::tempdir().unwrap();
    let data = large_file(dir.path());
    let t0 = tokio::time::Instant::now();

    let streams = Streams::default();
    let sent = send(dir.path(), HeaderMap::new(), &streams).await;

    assert_eq!(
        tokio::time::Instant::now(),
        t0,
        "sending the body moved the paused clock: it waited on a timer"
    );
    assert_eq!(sent.status, StatusCode::OK);
    assert_whole_pieces(&sent.frames, data.len(), LONE_CHUNK);
    assert_eq!(streams.in_flight(), 0, "the finished body left its slot");
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

    let sent = send(dir.path(), headers, &Streams::default()).await;

    assert_eq!(
        tokio::time::Instant::now(),
        t0,
        "the body waited on a timer"
    );
    assert_eq!(sent.status, StatusCode::PARTIAL_CONTENT);
    assert_whole_pieces(&sent.frames, data.len() - from, LONE_CHUNK);
    assert!(sent.body == data[from..], "the range differs from the file");
    assert_eq!(sent.done, Some(((data.len() - from) as u64, true)));
}

#[tokio::test(start_paused = true)]
async fn many_streams_at_once_take_the_smaller_piece_and_few_the_larger() {
    let dir = tempfile::tempdir().unwrap();
    let data = large_file(dir.path());
    let streams = Streams::default();
    // FEW_STREAMS bodies in flight (built, not yet read): the next one is
    // one too many for the large piece.
    let mut held = Vec::new();
    for _ in 0..FEW_STREAMS {
        let src = DirSource::new(dir.path()).unwrap();
        let (Opened::Disk(file), meta) = src.open_whole("image.bin").await.unwrap() else {
            panic!("disk path expected");
        };
        let served = send_file::serve(
            Source::File(file, meta, streams.clone()),
            &Method::GET,
            &HeaderMap::new(),
            None,
            "application/octet-stream",
            None,
        )
        .await
        .unwrap();
        held.push(served.response);
    }
    assert_eq!(streams.in_flight(), FEW_STREAMS);
    let sent = send(dir.path(), HeaderMap::new(), &streams).await;
    assert_whole_pieces(&sent.frames, data.len(), CHUNK);
    assert!(sent.body == data, "the body differs from the file");
    // The crowd leaves (its bodies dropped unread): alone again, large.
    drop(held);
    assert_eq!(streams.in_flight(), 0);
    let sent = send(dir.path(), HeaderMap::new(), &streams).await;
    assert_whole_pieces(&sent.frames, data.len(), LONE_CHUNK);
}
