//! The send timeout of h2 connections. hyper asks a response body for its next frame only while
//! the client's flow-control window has room, so a client that stops taking a stream's data
//! (or never widens its window) leaves the body, and the backend connection it holds, waiting
//! for ever: the h2 form of a client that stops reading. Every streamed response of a
//! connection is watched: when a frame was handed to hyper and the next one has not been asked
//! for within `timeouts.send`, the body is dropped, which frees its backend (hyper resets the
//! stream when it asks again). A body waiting for its backend is not the client's stall: the
//! body timeout covers that.
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame, SizeHint};

use super::body::ProxyBody;
use crate::error::BoxError;
use crate::outlier::now_ms;

/// The streamed responses of one h2 connection.
pub(crate) struct SendWatch {
    limit: Duration,
    streams: Mutex<Vec<Weak<Watched>>>,
}

pub(crate) struct Watched {
    /// None once cut.
    body: Mutex<Option<ProxyBody>>,
    /// When the last frame was handed to hyper (`now_ms`, at least 1); 0 while hyper is
    /// waiting for the body rather than the body for hyper.
    handed_ms: AtomicU64,
}

/// A response body as hyper serves it on an h2 connection.
pub(crate) struct H2Body {
    inner: Inner,
    /// The response's map carries the body's Content-Length already (a backend's): its size
    /// is then not told to hyper, which looks the map up for Content-Length on every
    /// response whose size it is told.
    length_in_map: bool,
}

enum Inner {
    /// Whole already (the proxy's own answers) or empty: nothing to hold.
    Direct(ProxyBody),
    Watched(Arc<Watched>),
}

impl SendWatch {
    pub(crate) fn new(limit: Duration) -> Self {
        SendWatch { limit, streams: Mutex::new(Vec::new()) }
    }

    /// The response, its body watched if it streams from a backend; `length_in_map`: its map
    /// carries the body's Content-Length.
    pub(crate) fn watch(&self, resp: Response<ProxyBody>, length_in_map: bool) -> Response<H2Body> {
        resp.map(|body| H2Body { inner: self.inner(body), length_in_map })
    }

    fn inner(&self, body: ProxyBody) -> Inner {
        if !matches!(body, ProxyBody::Upstream(_)) || body.is_end_stream() {
            return Inner::Direct(body);
        }
        let watched = Arc::new(Watched { body: Mutex::new(Some(body)), handed_ms: AtomicU64::new(0) });
        let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        // Ended streams are dropped from the list when it would grow: it stays within
        // twice the streams open at once, however many a long connection serves.
        if streams.len() == streams.capacity() {
            streams.retain(|s| s.strong_count() > 0);
        }
        streams.push(Arc::downgrade(&watched));
        Inner::Watched(watched)
    }

    /// Cuts, every half `limit`, the streams whose client took nothing for `limit`; runs for
    /// the connection's life. Each cut is counted with `cut`.
    pub(crate) async fn run(&self, cut: impl Fn()) -> std::convert::Infallible {
        let limit_ms = self.limit.as_millis() as u64;
        // A zero limit must not make this a busy loop.
        let period = (self.limit / 2).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(period).await;
            let now = now_ms();
            let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
            streams.retain(|s| {
                let Some(s) = s.upgrade() else { return false };
                let handed = s.handed_ms.load(Relaxed);
                if handed == 0 || now.saturating_sub(handed) < limit_ms {
                    return true;
                }
                tracing::debug!("an h2 client took no byte of a response for the send timeout");
                drop(s.body.lock().unwrap_or_else(PoisonError::into_inner).take());
                cut();
                false
            });
        }
    }
}

impl Body for H2Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let w = match &mut self.get_mut().inner {
            Inner::Direct(b) => return Pin::new(b).poll_frame(cx),
            Inner::Watched(w) => w,
        };
        let mut body = w.body.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(b) = body.as_mut() else {
            return Poll::Ready(Some(Err("the client took no byte of the response for the send timeout".into())));
        };
        let r = Pin::new(b).poll_frame(cx);
        let handed = match &r {
            Poll::Ready(Some(Ok(_))) => now_ms().max(1),
            _ => 0,
        };
        w.handed_ms.store(handed, Relaxed);
        r
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Direct(b) => b.is_end_stream(),
            // A cut body is not at its end: asked again, it fails, and the stream is reset.
            Inner::Watched(w) => {
                w.body.lock().unwrap_or_else(PoisonError::into_inner).as_ref().is_some_and(|b| b.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        if self.length_in_map {
            return SizeHint::default();
        }
        match &self.inner {
            Inner::Direct(b) => b.size_hint(),
            Inner::Watched(w) => w
                .body
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map_or_else(SizeHint::default, |b| b.size_hint()),
        }
    }
}
