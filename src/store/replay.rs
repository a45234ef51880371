//! One watch, served the same way by the embedded and the memory store:
//! replay the log from the requested resourceVersion, then follow the live
//! feed, each event once and in order (an event both in the backlog and on
//! the feed is sent once: resourceVersions only grow). A watcher too slow
//! for the feed reads the log again from the last version it was sent;
//! when even that fails, the stream ends with the error. Only events of the
//! watch's namespace and selector are sent.

use std::future::Future;

use tokio::sync::{broadcast, mpsc};

use super::{ListOptions, StoreError, WatchEvent, WatchStream, key_of};

/// Events with their resourceVersions, oldest first.
pub type Logged = Vec<(u64, WatchEvent)>;

/// Serve a watch from `from` (exclusive): `backlog` is the log after it,
/// read after subscribing to `live`; `of_kind` keeps the feed's messages
/// about the watched kind; `catch_up(seen)` reads the log after `seen`.
pub fn serve<M, F, Fut>(
    opts: ListOptions,
    from: u64,
    backlog: Logged,
    mut live: broadcast::Receiver<M>,
    of_kind: impl Fn(M) -> Option<(u64, WatchEvent)> + Send + 'static,
    catch_up: F,
) -> WatchStream
where
    M: Clone + Send + 'static,
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Logged, StoreError>> + Send,
{
    let (tx, rx) = mpsc::channel::<Result<WatchEvent, StoreError>>(256);
    tokio::spawn(async move {
        let keep = |ev: &WatchEvent| {
            opts.namespace
                .as_ref()
                .is_none_or(|ns| key_of(ev.object()).0 == *ns)
                && opts.selector.matches(ev.object())
        };
        let mut seen = from;
        let mut pending = backlog;
        loop {
            for (rv, ev) in pending.drain(..) {
                if rv <= seen {
                    continue;
                }
                seen = rv;
                if keep(&ev) && tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            match live.recv().await {
                Ok(m) => pending.extend(of_kind(m)),
                Err(broadcast::error::RecvError::Lagged(_)) => match catch_up(seen).await {
                    Ok(evs) => pending = evs,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                },
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
