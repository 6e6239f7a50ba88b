//! An h2 request's body as `forward::handle` takes it: DATA frames, then trailers, with the
//! size the request declared (the body limits refuse a declared length over the limit before
//! a byte is read, and a backend is sent a Content-Length rather than chunks).
use std::pin::Pin;
use std::task::{Context, Poll};

use ::h2::RecvStream;
use bytes::Bytes;
use http::{HeaderMap, Method, header};
use http_body::{Body, Frame, SizeHint};

use super::fields::decimal;
use crate::error::BoxError;

pub(crate) struct InBody {
    /// None for a body that has ended already (most requests have none): asked, a stream
    /// answers under its connection's lock. None for CONNECT too, whose stream carries a
    /// tunnel's bytes rather than a body (the proxy answers CONNECT 405, as it did with
    /// hyper, which handed it an empty body).
    rs: Option<RecvStream>,
    data_done: bool,
    /// Of the declared length, what is still to come.
    remaining: Option<u64>,
}

impl InBody {
    /// The body of a request with `method` and `fields`; None for a CONNECT that declares a
    /// body, which hyper refused with a reset of the stream.
    pub(crate) fn of(rs: RecvStream, method: &Method, fields: &HeaderMap) -> Option<InBody> {
        // The h2 crate checks DATA against the first Content-Length; hyper took a length only
        // when all agree, so does this.
        let ended = InBody { rs: None, data_done: true, remaining: Some(0) };
        if rs.is_end_stream() {
            return Some(ended);
        }
        let declared = content_length(fields);
        if method == Method::CONNECT {
            return declared.is_none_or(|n| n == 0).then_some(ended);
        }
        Some(InBody { rs: Some(rs), data_done: false, remaining: declared })
    }
}

/// The length all Content-Length fields agree on, if any.
fn content_length(fields: &HeaderMap) -> Option<u64> {
    let mut found = None;
    for v in fields.get_all(header::CONTENT_LENGTH) {
        // A plain decimal number, as the h2 crate itself reads the field (no sign).
        let n = decimal(v.as_bytes().trim_ascii())?;
        if found.is_some_and(|f| f != n) {
            return None;
        }
        found = Some(n);
    }
    found
}

impl Body for InBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let Some(rs) = this.rs.as_mut() else { return Poll::Ready(None) };
        if !this.data_done {
            match rs.poll_data(cx) {
                Poll::Ready(Some(Ok(b))) => {
                    // The window is given back as data is taken: a backend that reads slowly
                    // slows its client, and the connection's other streams go on.
                    let _ = rs.flow_control().release_capacity(b.len());
                    this.remaining = this.remaining.map(|n| n.saturating_sub(b.len() as u64));
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => this.data_done = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        match rs.poll_trailers(cx) {
            Poll::Ready(Ok(Some(t))) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rs.as_ref().is_none_or(RecvStream::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.remaining.map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_is_taken_only_when_all_fields_agree() {
        let mut map = HeaderMap::new();
        assert_eq!(content_length(&map), None);
        map.append(header::CONTENT_LENGTH, "12".parse().unwrap());
        assert_eq!(content_length(&map), Some(12));
        map.append(header::CONTENT_LENGTH, "12".parse().unwrap());
        assert_eq!(content_length(&map), Some(12));
        map.append(header::CONTENT_LENGTH, "13".parse().unwrap());
        assert_eq!(content_length(&map), None);
        map.insert(header::CONTENT_LENGTH, "x".parse().unwrap());
        assert_eq!(content_length(&map), None);
    }
}
