//! Response bodies: the backend's body streamed through frame by frame (never buffered whole),
//! or a short body the proxy writes itself (errors).
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::fields::RawFields;
use super::idle::IdleTimer;
use super::upstream::{Conn, ResponseBody};
use crate::backend::ActiveGuard;
use crate::error::BoxError;
use crate::limits::Slot;
use crate::vip::Vip;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

pub(crate) enum ProxyBody {
    Upstream(UpstreamBody),
    Full(Option<Bytes>),
    /// A 101 answer's empty body, carrying the backend side of the tunnel the HTTP/1
    /// connection joins the client to once the head is written.
    Tunnel(Option<Tunnel>),
}

/// The backend side of an upgraded connection, and what the request holds for its lifetime
/// (the backend's active count and maxconn slot).
pub(crate) struct Tunnel {
    pub(crate) backend: Box<Conn>,
    pub(crate) hold: InFlight,
}

impl ProxyBody {
    pub(crate) fn full(b: impl Into<Bytes>) -> Self {
        ProxyBody::Full(Some(b.into()))
    }

    /// A backend response's own fields, while they are not in the response's map: they come
    /// before the map's fields, hop-by-hop ones left out (see `backend_fields_into_map`).
    pub(crate) fn raw_fields(&self) -> Option<&RawFields> {
        match self {
            ProxyBody::Upstream(u) => u.inner.raw_fields(),
            _ => None,
        }
    }

    /// A backend's body whose bytes are all in already, made a whole one: its backend
    /// connection goes back to the pool at once, even while an h2 client is slow to take the
    /// bytes (`h2_send` frees backends held by clients that stopped reading; this holds none).
    /// In place: the response that holds the body is not moved for it.
    pub(crate) fn make_whole_if_buffered(&mut self) {
        let ProxyBody::Upstream(u) = self else { return };
        if !u.inner.buffered_whole() {
            return;
        }
        // Ready at once: the bytes are in the buffer, nothing is read (so no waker is kept).
        // Taking the last frame gives the connection back (`finish`).
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Not reached otherwise (a length's frame, buffered): the body stays as it is.
        if let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut *u).poll_frame(&mut cx) {
            debug_assert!(u.inner.is_end_stream(), "a buffered body's one frame is all of it");
            *self = ProxyBody::Full(frame.into_data().ok());
        }
    }

    pub(crate) fn take_tunnel(&mut self) -> Option<Tunnel> {
        match self {
            ProxyBody::Tunnel(t) => t.take(),
            _ => None,
        }
    }
}

/// Room left in a map made of a backend response's fields for fields added later: an h2
/// response gets Date and Content-Length when they are missing (`h2_stream`), and a map made
/// exactly full is grown by an insert (a larger table, every field moved: about 0.9k
/// instructions a response).
pub(crate) const ROOM_AFTER: usize = 2;

/// Moves a backend response's own fields into its map, ahead of the fields the proxy added,
/// for what needs them there (h2 clients, rules that set or remove fields, the access log);
/// hop-by-hop fields stay out unless `hop_by_hop` (before `prepare_response` has run).
pub(crate) fn backend_fields_into_map(resp: &mut http::Response<ProxyBody>, hop_by_hop: bool) {
    if resp.body().raw_fields().is_none() {
        return;
    }
    let added = resp.headers().len();
    // An empty map is filled (the request's, left with its room: `finish_response`).
    let into = if added == 0 { std::mem::take(resp.headers_mut()) } else { http::HeaderMap::new() };
    let ProxyBody::Upstream(u) = resp.body_mut() else { return };
    let Some(map) = u.inner.take_fields(hop_by_hop, into, added + ROOM_AFTER) else { return };
    // The names and values were checked as the head was parsed: none fails here.
    let mut map = map.unwrap_or_default();
    if added == 0 {
        *resp.headers_mut() = map;
        return;
    }
    let added = std::mem::take(resp.headers_mut());
    let mut last = None;
    for (name, value) in added {
        // `None`: another value of the name before it.
        if let Some(n) = name {
            last = Some(n);
        }
        if let Some(n) = &last {
            map.append(n.clone(), value);
        }
    }
    *resp.headers_mut() = map;
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Upstream(u) => Pin::new(u).poll_frame(cx),
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|d| Ok(Frame::data(d)))),
            ProxyBody::Tunnel(_) => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Upstream(u) => u.inner.is_end_stream(),
            ProxyBody::Full(b) => b.is_none(),
            ProxyBody::Tunnel(_) => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Upstream(u) => u.inner.size_hint(),
            ProxyBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ProxyBody::Tunnel(_) => SizeHint::with_exact(0),
        }
    }
}

/// A backend's response body. Holds what the request occupies (the backend's active count,
/// its maxconn slot, the connection) until the body ends, then returns a reusable connection
/// to the pool; a body that breaks or is abandoned takes its connection down with it. A backend
/// that sends nothing for the VIP's body timeout mid-body is cut off and counted as failing.
pub(crate) struct UpstreamBody {
    inner: ResponseBody,
    done: Option<InFlight>,
    idle: IdleTimer,
}

/// What a request holds while its response streams.
pub(crate) struct InFlight {
    pub(crate) active: ActiveGuard,
    /// Held, not read: dropping it frees the backend's maxconn slot.
    #[allow(dead_code)]
    pub(crate) slot: Slot,
    pub(crate) pool_tag: Option<SocketAddr>,
    /// The VIP the request came to, for its outlier rules and body timeout: a pointer, where
    /// copies of both made the response that holds this 288 bytes, and a response moves
    /// several times on its way to the client (a copy of up to 256 bytes takes half the
    /// instructions of a larger one).
    pub(crate) vip: Arc<Vip>,
}

impl UpstreamBody {
    pub(crate) fn new(inner: ResponseBody, done: InFlight) -> Self {
        UpstreamBody { inner, idle: IdleTimer::new(done.vip.spec.options.timeouts.body), done: Some(done) }
    }

    fn finish(&mut self, ok: bool) {
        let Some(f) = self.done.take() else { return };
        let backend = &f.active.0;
        if ok {
            if let Some(conn) = self.inner.take_reusable() {
                backend.pool().put(conn, f.pool_tag);
            }
        } else {
            // The backend broke off mid-response: the client sees the stream fail (reset or
            // closed connection), and the backend is counted as failing.
            backend.counters.error();
            backend.record_failure(&f.vip.spec.options.outlier);
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        match &r {
            Poll::Ready(None) => this.finish(true),
            Poll::Ready(Some(Err(_))) => this.finish(false),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.finish(true),
            Poll::Ready(Some(Ok(_))) => this.idle.activity(),
            Poll::Pending => {
                if this.idle.expired(cx) {
                    this.finish(false);
                    return Poll::Ready(Some(Err("the backend stopped sending its response body".into())));
                }
            }
        }
        r.map(|o| o.map(|r| r.map_err(BoxError::from)))
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
