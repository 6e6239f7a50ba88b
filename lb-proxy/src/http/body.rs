//! Response bodies: the backend's body streamed through frame by frame (never buffered whole),
//! or a short body the proxy writes itself (errors).
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::backend::ActiveGuard;
use crate::limits::Slot;
use crate::outlier::now_ms;
use crate::pool::Sender;

pub(crate) enum ProxyBody {
    Upstream(UpstreamBody),
    Full(Option<Bytes>),
}

impl ProxyBody {
    pub(crate) fn full(b: impl Into<Bytes>) -> Self {
        ProxyBody::Full(Some(b.into()))
    }

    pub(crate) fn empty() -> Self {
        ProxyBody::Full(None)
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Upstream(u) => Pin::new(u).poll_frame(cx),
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Upstream(u) => u.inner.is_end_stream(),
            ProxyBody::Full(b) => b.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Upstream(u) => u.inner.size_hint(),
            ProxyBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}

/// A backend's response body. Holds what the request occupies (the backend's active count,
/// its maxconn slot, the connection) until the body ends, then returns the connection to the
/// pool; a body that breaks or is abandoned takes its connection down with it.
pub(crate) struct UpstreamBody {
    inner: Incoming,
    done: Option<InFlight>,
}

/// What a request holds while its response streams.
pub(crate) struct InFlight {
    pub(crate) active: ActiveGuard,
    /// Held, not read: dropping it frees the backend's maxconn slot.
    #[allow(dead_code)]
    pub(crate) slot: Slot,
    /// None for connections that must not be reused (upgraded ones).
    pub(crate) sender: Option<Sender>,
    pub(crate) pool_tag: Option<SocketAddr>,
    pub(crate) outlier: crate::config::Outlier,
}

impl UpstreamBody {
    pub(crate) fn new(inner: Incoming, done: InFlight) -> Self {
        UpstreamBody {
            inner,
            done: Some(done),
        }
    }

    fn finish(&mut self, ok: bool) {
        let Some(f) = self.done.take() else { return };
        let backend = &f.active.0;
        if ok {
            if let Some(s) = f.sender {
                backend.pool().put(s, f.pool_tag);
            }
        } else {
            // The backend broke off mid-response: the client sees the stream fail (reset or
            // closed connection), and the backend is counted as failing.
            backend.counters.error();
            backend.outlier.record_failure(&f.outlier, now_ms());
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match &r {
            Poll::Ready(None) => self.finish(true),
            Poll::Ready(Some(Err(_))) => self.finish(false),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.finish(true),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // Bodies that are empty from the start (HEAD, 204, 304) are never polled.
        if self.inner.is_end_stream() {
            self.finish(true);
        }
    }
}
