//! Request-smuggling guard. hyper resolves a request carrying both Content-Length and
//! Transfer-Encoding by dropping Content-Length (RFC 9112 §6.3 allows that), so the proxy
//! never sees the conflict. This wrapper follows the client's byte stream with a minimal
//! HTTP/1 framing tracker (heads, Content-Length bodies, chunked bodies) and records which
//! request (by position on the connection) had both, so the service refuses exactly that one.
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Longest chunk-size or trailer line followed; longer ones stop the tracking (hyper rejects
/// them anyway).
const MAX_LINE: usize = 4096;
/// Header fields parsed per head; more stop the tracking (hyper's limit answers 431).
const MAX_FIELDS: usize = 128;

/// Shared with the connection's service: the index of the first request with conflicting
/// framing (`u64::MAX`: none yet).
#[derive(Debug)]
pub(crate) struct Conflicts(AtomicU64);

impl Conflicts {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Conflicts(AtomicU64::new(u64::MAX)))
    }

    pub(crate) fn is_conflicting(&self, request_index: u64) -> bool {
        self.0.load(Relaxed) == request_index
    }
}

enum State {
    Head(Vec<u8>),
    Body(u64),
    ChunkSize(Vec<u8>),
    ChunkData(u64),
    ChunkCrlf(u8),
    Trailer(Vec<u8>),
    /// Not HTTP/1 framing any more (upgrade, h2, or something hyper will refuse).
    Off,
}

pub(crate) struct Sniffer<T> {
    inner: T,
    state: State,
    heads: u64,
    head_limit: usize,
    conflicts: Arc<Conflicts>,
}

impl<T> Sniffer<T> {
    pub(crate) fn new(inner: T, head_limit: usize, conflicts: Arc<Conflicts>) -> Self {
        Sniffer {
            inner,
            state: State::Head(Vec::new()),
            heads: 0,
            head_limit,
            conflicts,
        }
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
                    (
                        if left == 0 {
                            State::Head(Vec::new())
                        } else {
                            State::Body(left)
                        },
                        used,
                    )
                }
                State::ChunkSize(line) => match take_line(line, data) {
                    Line::Partial(line, used) => (State::ChunkSize(line), used),
                    Line::Done(line, used) => (chunk_size(&line), used),
                    Line::TooLong => (State::Off, data.len()),
                },
                State::ChunkData(n) => {
                    let used = (n as usize).min(data.len());
                    let left = n - used as u64;
                    (
                        if left == 0 {
                            State::ChunkCrlf(2)
                        } else {
                            State::ChunkData(left)
                        },
                        used,
                    )
                }
                State::ChunkCrlf(n) => {
                    let used = (n as usize).min(data.len());
                    let left = n - used as u8;
                    (
                        if left == 0 {
                            State::ChunkSize(Vec::new())
                        } else {
                            State::ChunkCrlf(left)
                        },
                        used,
                    )
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
            && let Some(p) = data.windows(4).position(|w| w == b"\r\n\r\n")
        {
            let end = p + 4;
            return (self.parsed_head(&data[..end]), end);
        }
        let before = buf.len();
        buf.extend_from_slice(data);
        // Search from a little before the new bytes: the terminator may straddle reads.
        let from = before.saturating_sub(3);
        let Some(end) = buf[from..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|p| from + p + 4)
        else {
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
        // Left uninitialized: httparse writes the fields it finds (no 4 KiB fill per head).
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
        let mut req = httparse::Request::new(&mut []);
        if !matches!(
            req.parse_with_uninit_headers(head, &mut fields),
            Ok(httparse::Status::Complete(_))
        ) {
            return State::Off;
        }
        let mut length: Option<u64> = None;
        let (mut te, mut cl, mut upgrade) = (false, false, false);
        for h in req.headers.iter() {
            if h.name.eq_ignore_ascii_case("transfer-encoding") {
                te = true;
            } else if h.name.eq_ignore_ascii_case("content-length") {
                cl = true;
                length = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok());
            } else if h.name.eq_ignore_ascii_case("upgrade") {
                upgrade = true;
            }
        }
        if te && cl {
            // hyper closes the connection after such a request: nothing follows to track.
            let _ = self
                .conflicts
                .0
                .compare_exchange(u64::MAX, index, Relaxed, Relaxed);
            return State::Off;
        }
        if upgrade {
            State::Off
        } else if te {
            State::ChunkSize(Vec::new())
        } else if cl {
            match length {
                Some(0) => State::Head(Vec::new()),
                Some(n) => State::Body(n),
                None => State::Off,
            }
        } else {
            State::Head(Vec::new())
        }
    }
}

enum Line {
    Partial(Vec<u8>, usize),
    /// The line without its CRLF, and the bytes of `data` used.
    Done(Vec<u8>, usize),
    TooLong,
}

fn take_line(mut line: Vec<u8>, data: &[u8]) -> Line {
    let used = data
        .iter()
        .position(|&b| b == b'\n')
        .map_or(data.len(), |p| p + 1);
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
    let parsed = std::str::from_utf8(hex)
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim(), 16).ok());
    match parsed {
        Some(0) => State::Trailer(Vec::new()),
        Some(n) => State::ChunkData(n),
        None => State::Off,
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Sniffer<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r
            && !matches!(this.state, State::Off)
        {
            this.feed(&buf.filled()[before..]);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Sniffer<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
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
        let c = Conflicts::new();
        let mut s = Sniffer::new((), 64 * 1024, c.clone());
        for p in parts {
            s.feed(p);
        }
        (s.heads, c.0.load(Relaxed))
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
    fn clean_traffic_has_no_conflict() {
        let (heads, at) = sniff(&[b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"]);
        assert_eq!((heads, at), (2, u64::MAX));
    }
}
