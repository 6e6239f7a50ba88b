//! A backend's response body, read from its connection as the client takes it. At a clean end
//! the connection is handed back for reuse.
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::head::ResponseFraming;
use super::{BackendFault, Conn};
use crate::http::decode::{Decoder, Step};
use crate::http::fields::RawFields;
use http::HeaderMap;

pub(crate) struct ResponseBody {
    conn: Option<Box<Conn>>,
    decoder: Decoder,
    /// A 101 response: the connection is the tunnel's.
    upgrade: bool,
    /// The connection may serve another request once this body has been read whole.
    keep_alive: bool,
    /// The response's fields are still the connection's `RawFields`, not in its map.
    raw_fields: bool,
}

impl ResponseBody {
    pub(crate) fn new(conn: Box<Conn>, framing: ResponseFraming, keep_alive: bool) -> Self {
        let decoder = match framing {
            ResponseFraming::Empty | ResponseFraming::Upgrade => Decoder::Done,
            ResponseFraming::Length(n) => Decoder::length(n),
            ResponseFraming::Chunked => Decoder::chunked(),
            ResponseFraming::UntilClose => Decoder::UntilClose,
        };
        let upgrade = framing == ResponseFraming::Upgrade;
        ResponseBody { conn: Some(conn), decoder, upgrade, keep_alive, raw_fields: true }
    }

    /// The connection, once the body has been read whole and the connection may be reused.
    pub(crate) fn take_reusable(&mut self) -> Option<Box<Conn>> {
        let reusable = self.keep_alive && !self.upgrade && self.decoder.is_done();
        // Bytes after the response's end were never asked for: the framing is lost.
        self.conn.take_if(|c| reusable && c.buf.is_empty())
    }

    /// The response's fields, while they are not in its map (and the connection, which
    /// holds them, is not yet back in the pool: the head is written before the body is read).
    pub(crate) fn raw_fields(&self) -> Option<&RawFields> {
        self.conn.as_ref().filter(|_| self.raw_fields).map(|c| &c.fields)
    }

    /// The response's fields, once, in `into` (an empty map) with room for `room` more: see
    /// `RawFields::to_map`.
    pub(crate) fn take_fields(
        &mut self,
        hop_by_hop: bool,
        into: HeaderMap,
        room: usize,
    ) -> Option<Result<HeaderMap, &'static str>> {
        let map = self.raw_fields().map(|f| f.to_map(hop_by_hop, into, room));
        self.raw_fields = false;
        map
    }

    /// Whether the rest of a length-framed body is in the buffer already (a small body read
    /// with its head): its next frame is then the whole of it, and takes no read.
    pub(crate) fn buffered_whole(&self) -> bool {
        match (&self.decoder, &self.conn) {
            (Decoder::Length(left), Some(conn)) => conn.buf.len() as u64 >= *left,
            _ => false,
        }
    }

    /// The connection of a 101 response, with whatever the backend sent after the head.
    pub(crate) fn take_upgraded(&mut self) -> Option<Box<Conn>> {
        if self.upgrade { self.conn.take() } else { None }
    }

    fn fail(&mut self, fault: BackendFault) -> Poll<Option<Result<Frame<Bytes>, BackendFault>>> {
        self.decoder = Decoder::Done;
        self.conn = None;
        Poll::Ready(Some(Err(fault)))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BackendFault;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BackendFault>>> {
        let this = &mut *self;
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.decoder.step(&mut conn.buf) {
                Step::Frame(f) => return Poll::Ready(Some(Ok(f))),
                Step::End => return Poll::Ready(None),
                Step::Malformed(e) => return this.fail(BackendFault::Malformed(e)),
                Step::More => {}
            }
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if matches!(this.decoder, Decoder::UntilClose) => {
                    this.decoder = Decoder::Done;
                    this.keep_alive = false;
                }
                Ok(0) => return this.fail(BackendFault::Closed),
                Ok(_) => {}
                Err(e) => return this.fail(BackendFault::Io(e)),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        self.decoder.size_hint()
    }
}
