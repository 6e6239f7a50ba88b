//! A backend's response body, read from its connection as the client takes it: by length,
//! chunked (RFC 9112 §7.1), or until the backend closes. At a clean end the connection is
//! handed back for reuse.
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};

use super::head::ResponseFraming;
use super::{BackendFault, Conn};

/// Frames up to this size are copied out of the read buffer, which can then be reused; larger
/// ones are handed on without a copy.
const COPY_BELOW: usize = 4096;
/// Longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 4096;
/// Most trailer bytes accepted.
const MAX_TRAILERS: usize = 16 * 1024;

pub(crate) struct ResponseBody {
    conn: Option<Box<Conn>>,
    state: State,
    /// The connection may serve another request once this body has been read whole.
    keep_alive: bool,
}

enum State {
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    /// Trailer fields so far (boxed: most chunked bodies have none), and their size.
    Trailers(Option<Box<HeaderMap>>, usize),
    UntilClose,
    /// Read whole (or never had a body).
    Done,
    /// A 101 response: the connection is the tunnel's.
    Upgrade,
    Failed,
}

impl ResponseBody {
    pub(crate) fn new(conn: Box<Conn>, framing: ResponseFraming, keep_alive: bool) -> Self {
        let state = match framing {
            ResponseFraming::Empty => State::Done,
            ResponseFraming::Length(n) => State::Length(n),
            ResponseFraming::Chunked => State::ChunkSize,
            ResponseFraming::UntilClose => State::UntilClose,
            ResponseFraming::Upgrade => State::Upgrade,
        };
        ResponseBody { conn: Some(conn), state, keep_alive }
    }

    /// The connection, once the body has been read whole and the connection may be reused.
    pub(crate) fn take_reusable(&mut self) -> Option<Box<Conn>> {
        let reusable = self.keep_alive && matches!(self.state, State::Done);
        // Bytes after the response's end were never asked for: the framing is lost.
        self.conn.take_if(|c| reusable && c.buf.is_empty())
    }

    /// The connection of a 101 response, with whatever the backend sent after the head.
    pub(crate) fn take_upgraded(&mut self) -> Option<Box<Conn>> {
        if matches!(self.state, State::Upgrade) { self.conn.take() } else { None }
    }

    /// One step of decoding what is buffered: a frame, the end, or None when more must be read.
    fn decode(&mut self) -> Option<Result<Option<Frame<Bytes>>, BackendFault>> {
        let conn = self.conn.as_mut()?;
        let buf = &mut conn.buf;
        loop {
            match &mut self.state {
                State::Done | State::Upgrade | State::Failed => return Some(Ok(None)),
                State::Length(left) | State::ChunkData(left) => {
                    if buf.is_empty() {
                        return None;
                    }
                    let n = (*left).min(buf.len() as u64) as usize;
                    *left -= n as u64;
                    let data = if n <= COPY_BELOW {
                        let d = Bytes::copy_from_slice(&buf[..n]);
                        buf.advance(n);
                        d
                    } else {
                        buf.split_to(n).freeze()
                    };
                    if *left == 0 {
                        self.state = if matches!(self.state, State::Length(_)) { State::Done } else { State::ChunkEnd };
                    }
                    return Some(Ok(Some(Frame::data(data))));
                }
                State::UntilClose => {
                    if buf.is_empty() {
                        return None;
                    }
                    return Some(Ok(Some(Frame::data(buf.split().freeze()))));
                }
                State::ChunkSize => {
                    let line = match take_line(buf) {
                        Ok(Some(line)) => line,
                        Ok(None) => return None,
                        Err(e) => return Some(Err(e)),
                    };
                    match chunk_size(&line) {
                        Ok(0) => self.state = State::Trailers(None, 0),
                        Ok(n) => self.state = State::ChunkData(n),
                        Err(e) => return Some(Err(e)),
                    }
                }
                State::ChunkEnd => {
                    if buf.len() < 2 {
                        return None;
                    }
                    if &buf[..2] != b"\r\n" {
                        return Some(Err(BackendFault::Malformed("chunk not followed by CRLF")));
                    }
                    buf.advance(2);
                    self.state = State::ChunkSize;
                }
                State::Trailers(trailers, size) => {
                    let line = match take_line(buf) {
                        Ok(Some(line)) => line,
                        Ok(None) => return None,
                        Err(e) => return Some(Err(e)),
                    };
                    if line.is_empty() {
                        let trailers = trailers.take();
                        self.state = State::Done;
                        return Some(Ok(trailers.map(|t| Frame::trailers(*t))));
                    }
                    *size += line.len();
                    if *size > MAX_TRAILERS {
                        return Some(Err(BackendFault::Malformed("trailers too large")));
                    }
                    match trailer(&line) {
                        Ok((name, value)) => {
                            trailers.get_or_insert_default().append(name, value);
                        }
                        Err(e) => return Some(Err(e)),
                    }
                }
            }
        }
    }
}

/// Takes one CRLF-terminated line off the front of `buf` (without the CRLF).
fn take_line(buf: &mut bytes::BytesMut) -> Result<Option<Bytes>, BackendFault> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(end) => {
            let line = buf.split_to(end).freeze();
            buf.advance(2);
            Ok(Some(line))
        }
        None if buf.len() > MAX_LINE => Err(BackendFault::Malformed("chunk line too long")),
        None => Ok(None),
    }
}

/// A chunk-size line: hex digits, then optional extensions (ignored).
fn chunk_size(line: &[u8]) -> Result<u64, BackendFault> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let rest = &line[digits..];
    let rest_ok = rest.is_empty() || matches!(rest.iter().find(|b| !matches!(b, b' ' | b'\t')), None | Some(b';'));
    if digits == 0 || digits > 15 || !rest_ok {
        return Err(BackendFault::Malformed("chunk size"));
    }
    let text = std::str::from_utf8(&line[..digits]).map_err(|_| BackendFault::Malformed("chunk size"))?;
    u64::from_str_radix(text, 16).map_err(|_| BackendFault::Malformed("chunk size"))
}

fn trailer(line: &Bytes) -> Result<(HeaderName, HeaderValue), BackendFault> {
    let colon = line.iter().position(|&b| b == b':').ok_or(BackendFault::Malformed("trailer"))?;
    let name = HeaderName::from_bytes(&line[..colon]).map_err(|_| BackendFault::Malformed("trailer name"))?;
    let value = line.slice(colon + 1..);
    let start = value.iter().position(|b| !matches!(b, b' ' | b'\t')).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !matches!(b, b' ' | b'\t')).map_or(start, |e| e + 1);
    let value = HeaderValue::from_maybe_shared(value.slice(start..end.max(start)))
        .map_err(|_| BackendFault::Malformed("trailer value"))?;
    Ok((name, value))
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BackendFault;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BackendFault>>> {
        let this = &mut *self;
        loop {
            if let Some(step) = this.decode() {
                if step.is_err() {
                    this.state = State::Failed;
                    this.conn = None;
                }
                return Poll::Ready(step.transpose());
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if matches!(this.state, State::UntilClose) => {
                    this.state = State::Done;
                    this.keep_alive = false;
                }
                Ok(0) => {
                    this.state = State::Failed;
                    this.conn = None;
                    return Poll::Ready(Some(Err(BackendFault::Closed)));
                }
                Ok(_) => {}
                Err(e) => {
                    this.state = State::Failed;
                    this.conn = None;
                    return Poll::Ready(Some(Err(BackendFault::Io(e))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done | State::Upgrade | State::Failed)
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Length(n) => SizeHint::with_exact(n),
            State::Done | State::Upgrade | State::Failed => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_lines() {
        assert_eq!(chunk_size(b"1a").unwrap(), 26);
        assert_eq!(chunk_size(b"0").unwrap(), 0);
        assert_eq!(chunk_size(b"A;name=value").unwrap(), 10);
        assert_eq!(chunk_size(b"a ;x").unwrap(), 10);
        for bad in [&b""[..], b"g", b"-1", b"1x", b"0x10", b"1111111111111111"] {
            assert!(chunk_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn trailer_lines() {
        let (n, v) = trailer(&Bytes::from_static(b"X-Sum:  abc \t")).unwrap();
        assert_eq!((n.as_str(), v.to_str().unwrap()), ("x-sum", "abc"));
        assert!(trailer(&Bytes::from_static(b"no colon")).is_err());
        assert!(trailer(&Bytes::from_static(b"bad name: 1")).is_err());
    }
}
