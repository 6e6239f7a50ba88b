//! Request-smuggling guard. hyper resolves a request carrying both Content-Length and
//! Transfer-Encoding by dropping Content-Length (RFC 9112 §6.3 allows that), and accepts
//! repeated equal Content-Lengths, so the proxy never sees them. This wrapper follows the
//! client's byte stream with a minimal HTTP/1 framing tracker (heads, Content-Length bodies,
//! chunked bodies) and records which request (by position on the connection) had ambiguous
//! framing (RFC 9112 §6.1, §6.3: CL with TE, several CLs, a CL that is not one number) or a
//! head it cannot parse, so the service refuses exactly that one. It keeps tracking through
//! requests that carry `Upgrade` and through heads with any number of fields; only a
//! connection that really switched protocols ends it.
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::shared::ConnShared;

/// Longest chunk-size or trailer line followed; longer ones stop the tracking (hyper rejects
/// them anyway).
const MAX_LINE: usize = 4096;
/// Header fields parsed on the stack; heads with more are parsed again with room for all.
const STACK_FIELDS: usize = 128;
/// Most fields of a head that can still be parsed (beyond any configurable limit).
const MAX_FIELDS: usize = 64 * 1024;

/// Where the client is in its byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Between requests (nothing of the next head read yet).
    Between,
    /// Part of a head read.
    InHead,
    /// In a body, or no longer HTTP/1 framing.
    Other,
}

enum State {
    Head(Vec<u8>),
    Body(u64),
    ChunkSize(Vec<u8>),
    ChunkData(u64),
    ChunkCrlf(u8),
    Trailer(Vec<u8>),
    /// Not HTTP/1 framing any more (switched protocols, or a head hyper refuses too).
    Off,
}

pub(crate) struct Sniffer<T> {
    inner: T,
    state: State,
    heads: u64,
    head_limit: usize,
    shared: Arc<ConnShared>,
}

impl<T> Sniffer<T> {
    pub(crate) fn new(inner: T, head_limit: usize, shared: Arc<ConnShared>) -> Self {
        Sniffer { inner, state: State::Head(Vec::new()), heads: 0, head_limit, shared }
    }

    pub(crate) fn phase(&self) -> Phase {
        match &self.state {
            State::Head(b) if b.is_empty() => Phase::Between,
            State::Head(_) => Phase::InHead,
            _ => Phase::Other,
        }
    }

    /// Heads seen so far.
    pub(crate) fn heads(&self) -> u64 {
        self.heads
    }

    pub(crate) fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let state = std::mem::replace(&mut self.state, State::Off);
            let (next, used) = match state {
                State::Off => return,
                State::Head(buf) => self.head(buf, data),
                State::Body(n) => {
                    let used = (n as usize).min(data.len());
                    let left = n - used as u64;
                    (if left == 0 { State::Head(Vec::new()) } else { State::Body(left) }, used)
                }
                State::ChunkSize(line) => match take_line(line, data) {
                    Line::Partial(line, used) => (State::ChunkSize(line), used),
                    Line::Done(line, used) => (chunk_size(&line), used),
                    Line::TooLong => (State::Off, data.len()),
                },
                State::ChunkData(n) => {
                    let used = (n as usize).min(data.len());
                    let left = n - used as u64;
                    (if left == 0 { State::ChunkCrlf(2) } else { State::ChunkData(left) }, used)
                }
                State::ChunkCrlf(n) => {
                    let used = (n as usize).min(data.len());
                    let left = n - used as u8;
                    (if left == 0 { State::ChunkSize(Vec::new()) } else { State::ChunkCrlf(left) }, used)
                }
                State::Trailer(line) => match take_line(line, data) {
                    Line::Partial(line, used) => (State::Trailer(line), used),
                    Line::Done(line, used) if line.is_empty() => (State::Head(Vec::new()), used),
                    Line::Done(_, used) => (State::Trailer(Vec::new()), used),
                    Line::TooLong => (State::Off, data.len()),
                },
            };
            self.state = next;
            data = &data[used..];
        }
    }

    fn head(&mut self, mut buf: Vec<u8>, data: &[u8]) -> (State, usize) {
        // Fast path: the whole head in this read (the usual case) is parsed in place.
        if buf.is_empty()
            && let Some(end) = head_end(data, 0)
        {
            return (self.parsed_head(&data[..end]), end);
        }
        let before = buf.len();
        buf.extend_from_slice(data);
        // Search from a little before the new bytes: the terminator may straddle reads.
        let Some(end) = head_end(&buf, before.saturating_sub(2)) else {
            if buf.len() > self.head_limit {
                return (State::Off, data.len());
            }
            return (State::Head(buf), data.len());
        };
        (self.parsed_head(&buf[..end]), end - before)
    }

    /// Records the head's framing; returns the state for what follows it.
    fn parsed_head(&mut self, head: &[u8]) -> State {
        let index = self.heads;
        self.heads += 1;
        self.shared.head_seen();
        match framing(head) {
            Some(Framing::None) => State::Head(Vec::new()),
            Some(Framing::Length(n)) => State::Body(n),
            Some(Framing::Chunked) => State::ChunkSize(Vec::new()),
            None => {
                // hyper closes the connection after the refusal: nothing follows to track.
                self.shared.refuse(index);
                State::Off
            }
        }
    }
}

/// The end of a head: just past its first empty line, ended by CRLF or by a bare LF (which
/// hyper accepts too, RFC 9112 §2.2). The search starts at `from`.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(p) = buf.get(i..)?.iter().position(|&b| b == b'\n') {
        let lf = i + p;
        match buf.get(lf + 1..) {
            Some([b'\n', ..]) => return Some(lf + 2),
            Some([b'\r', b'\n', ..]) => return Some(lf + 3),
            _ => i = lf + 1,
        }
    }
    None
}

enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// How a request head frames its body; None when it is ambiguous or unparsable.
fn framing(head: &[u8]) -> Option<Framing> {
    if !may_frame_or_fold(head) {
        return Some(Framing::None);
    }
    // Left uninitialized: httparse writes the fields it finds (no 4 KiB fill per head).
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_FIELDS];
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(head, &mut fields) {
        Ok(httparse::Status::Complete(_)) => framing_of(req.headers),
        Err(httparse::Error::TooManyHeaders) => {
            let mut fields = vec![httparse::EMPTY_HEADER; MAX_FIELDS.min(head.len() / 2)];
            let mut req = httparse::Request::new(&mut fields);
            match req.parse(head) {
                Ok(httparse::Status::Complete(_)) => framing_of(req.headers),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether some line of the head starts with Content-Length or Transfer-Encoding (any case) or
/// with a space or tab (obsolete line folding). Only such a head needs parsing here: any other
/// is bodiless and unambiguous, and hyper judges the rest of its syntax. Most heads are of
/// that kind, and this scan costs a fraction of a parse.
fn may_frame_or_fold(head: &[u8]) -> bool {
    let starts = |line: &[u8], name: &[u8]| line.get(..name.len()).is_some_and(|l| l.eq_ignore_ascii_case(name));
    memchr::memchr_iter(b'\n', head).any(|lf| {
        let line = &head[lf + 1..];
        match line.first() {
            Some(b' ' | b'\t') => true,
            Some(b'c' | b'C') => starts(line, b"content-length"),
            Some(b't' | b'T') => starts(line, b"transfer-encoding"),
            _ => false,
        }
    })
}

fn framing_of(fields: &[httparse::Header<'_>]) -> Option<Framing> {
    let (mut te, mut lengths) = (false, 0);
    let mut length: Option<u64> = None;
    for h in fields {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            te = true;
        } else if h.name.eq_ignore_ascii_case("content-length") {
            lengths += 1;
            // Only a plain decimal number: "+5", "5, 5" and the like are refused.
            length = std::str::from_utf8(h.value)
                .ok()
                .map(|v| v.trim_matches([' ', '\t']))
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse().ok());
            length?;
        }
    }
    match (te, lengths, length) {
        (true, 0, _) => Some(Framing::Chunked),
        (false, 0, _) => Some(Framing::None),
        (false, 1, Some(0)) => Some(Framing::None),
        (false, 1, Some(n)) => Some(Framing::Length(n)),
        _ => None,
    }
}

enum Line {
    Partial(Vec<u8>, usize),
    /// The line without its CRLF, and the bytes of `data` used.
    Done(Vec<u8>, usize),
    TooLong,
}

fn take_line(mut line: Vec<u8>, data: &[u8]) -> Line {
    let used = data.iter().position(|&b| b == b'\n').map_or(data.len(), |p| p + 1);
    line.extend_from_slice(&data[..used]);
    if line.len() > MAX_LINE {
        return Line::TooLong;
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Line::Done(line, used)
    } else {
        Line::Partial(line, used)
    }
}

fn chunk_size(line: &[u8]) -> State {
    let hex = line.split(|&b| b == b';').next().unwrap_or_default();
    let parsed = std::str::from_utf8(hex).ok().and_then(|s| u64::from_str_radix(s.trim(), 16).ok());
    match parsed {
        Some(0) => State::Trailer(Vec::new()),
        Some(n) => State::ChunkData(n),
        None => State::Off,
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Sniffer<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if !matches!(this.state, State::Off) && this.shared.is_upgraded() {
            this.state = State::Off;
        }
        if let Poll::Ready(Ok(())) = r
            && !matches!(this.state, State::Off)
        {
            this.feed(&buf.filled()[before..]);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Sniffer<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sniff(parts: &[&[u8]]) -> (u64, u64) {
        let c = ConnShared::new();
        let mut s = Sniffer::new((), 64 * 1024, c.clone());
        for p in parts {
            s.feed(p);
        }
        (s.heads, c.first_refused())
    }

    #[test]
    fn finds_the_conflicting_request_after_bodies_of_both_kinds() {
        let (heads, at) = sniff(&[
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
            b"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n11;ext=1\r\nContent-Length: 1\r\n0\r\nX-T: 1\r\n\r\n",
            b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /d HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ]);
        assert_eq!(heads, 4);
        assert_eq!(at, 3, "only the fourth request conflicts");
    }

    #[test]
    fn byte_by_byte_reads_give_the_same_answer() {
        let data = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nPOST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n";
        let parts: Vec<&[u8]> = data.chunks(1).collect();
        assert_eq!(sniff(&parts), (2, 1));
    }

    #[test]
    fn upgrade_header_and_many_fields_do_not_stop_the_tracking() {
        let many: String = (0..300).map(|i| format!("X-F{i}: v\r\n")).collect();
        let smuggle =
            format!("POST / HTTP/1.1\r\nHost: x\r\n{many}Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
        let (heads, at) = sniff(&[b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n", smuggle.as_bytes()]);
        assert_eq!((heads, at), (2, 1));
    }

    #[test]
    fn repeated_or_odd_lengths_and_obs_fold_are_refused() {
        for head in [
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
            "POST / HTTP/1.1\r\nX-A: 1\r\n folded\r\nContent-Length: 3\r\n\r\n",
        ] {
            assert_eq!(sniff(&[head.as_bytes()]), (1, 0), "{head:?}");
        }
    }

    #[test]
    fn bare_lf_heads_are_followed_too() {
        let data = b"GET / HTTP/1.1\nHost: x\n\nPOST / HTTP/1.1\nContent-Length: 3\nTransfer-Encoding: chunked\n\n";
        assert_eq!(sniff(&[data]), (2, 1));
        let parts: Vec<&[u8]> = data.chunks(1).collect();
        assert_eq!(sniff(&parts), (2, 1));
    }

    #[test]
    fn only_heads_that_may_frame_or_fold_are_parsed() {
        assert!(!may_frame_or_fold(b"GET / HTTP/1.1\r\nHost: x\r\nX-Note: content-length: 5\r\n\r\n"));
        assert!(may_frame_or_fold(b"POST / HTTP/1.1\r\ncOnTeNt-LeNgTh: 5\r\n\r\n"));
        assert!(may_frame_or_fold(b"POST / HTTP/1.1\nTRANSFER-ENCODING: chunked\n\n"));
        assert!(may_frame_or_fold(b"GET / HTTP/1.1\r\nX-A: 1\r\n\tfolded\r\n\r\n"));
        // A folded line is refused even in a bodiless head; a name in a value changes nothing.
        assert_eq!(sniff(&[b"GET / HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n"]), (1, 0));
        assert_eq!(sniff(&[b"GET / HTTP/1.1\r\nX-Note: transfer-encoding\r\n\r\n"]), (1, u64::MAX));
    }

    #[test]
    fn clean_traffic_has_no_conflict() {
        let (heads, at) = sniff(&[b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"]);
        assert_eq!((heads, at), (2, u64::MAX));
    }
}
