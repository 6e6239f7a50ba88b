//! HTTP/1.1 to backends. A request is written to, and its response read from, the backend
//! connection by the task serving the request: no connection task and no channels between
//! the two sides, as a proxy that reads and writes both sockets itself does.
mod body;
mod head;
mod stream;

use std::io;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{Method, Response, Uri};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

pub(crate) use crate::error::BackendFault;
pub(crate) use body::ResponseBody;
use head::{MAX_RESPONSE_HEAD, RequestFraming, parse_response, response_framing};
pub(crate) use stream::Stream;

use crate::http::fields::{Fields, RawFields};

/// First read size; it doubles while reads fill it (large bodies), up to `MAX_READ`.
const MIN_READ: usize = 8 * 1024;
const MAX_READ: usize = 256 * 1024;

/// An HTTP/1.1 connection to a backend.
pub(crate) struct Conn {
    pub(crate) stream: Stream,
    /// Read from the backend and not yet taken.
    pub(crate) buf: BytesMut,
    /// The request head being written; kept so a reused connection allocates none.
    out: Vec<u8>,
    /// The fields of the last response head read, for the same reason.
    pub(crate) fields: RawFields,
    read_size: usize,
}

/// A failed exchange.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) fault: BackendFault,
    /// Nothing of the request was written: it may be sent again, on another connection.
    pub(crate) unsent: bool,
    /// The backend closed the connection without a byte of answer: on a reused connection,
    /// most likely its keep-alive timeout struck as the request left (RFC 9112 §9.3.1).
    pub(crate) silent: bool,
}

impl Conn {
    /// Boxed: a connection moves between the pool, requests and response bodies, and a
    /// pointer moves cheaper than the connection's buffers and stream.
    pub(crate) fn new(stream: Stream) -> Box<Self> {
        Box::new(Conn {
            stream,
            buf: BytesMut::new(),
            out: Vec::with_capacity(1024),
            fields: RawFields::default(),
            read_size: MIN_READ,
        })
    }

    pub(crate) fn is_usable(&self) -> bool {
        self.buf.is_empty() && self.stream.is_usable()
    }

    /// Reads what the backend sent into `buf`: the number of bytes, 0 at its end.
    pub(crate) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < self.read_size / 2 {
            self.buf.reserve(self.read_size);
        }
        let spare = self.buf.capacity() - self.buf.len();
        let r = tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut self.stream), cx, &mut self.buf);
        if let Poll::Ready(Ok(n)) = r
            && n == spare
        {
            self.read_size = (self.read_size * 2).min(MAX_READ);
        }
        r
    }

    async fn fill(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }

    async fn write_out(&mut self) -> io::Result<()> {
        self.stream.write_all(&self.out).await?;
        self.stream.flush().await
    }
}

/// A request as it goes to a backend: its method, its (origin-form) target and its body, its
/// fields kept beside it. Not an `http::Request`, whose map and extensions were made and
/// dropped unread for every request.
pub(crate) struct OutRequest<B> {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) body: B,
}

/// Sends `req` (its fields `fields`) on `conn` and reads the response head; its body is read as the returned
/// response's body is polled. `upgrade`: the request asks to switch protocols. The request's
/// body is taken as it is sent; the request itself stays the caller's, so one that was never
/// written (`Failure::unsent`) can be sent again elsewhere.
pub(crate) async fn send<B>(
    mut conn: Box<Conn>,
    req: &mut OutRequest<B>,
    fields: &impl Fields,
    upgrade: bool,
) -> Result<Response<ResponseBody>, Failure>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let failed = |fault, unsent| Failure { fault, unsent, silent: false };
    conn.out.clear();
    let framing = head::encode_request(req, fields, &mut conn.out);
    conn.write_out().await.map_err(|e| failed(BackendFault::Io(e), true))?;
    let complete = match framing {
        RequestFraming::None => true,
        _ => send_body(&mut conn, &mut req.body, framing == RequestFraming::Chunked)
            .await
            .map_err(|f| failed(f, false))?,
    };
    let mut answered = false;
    let parts = loop {
        if !conn.buf.is_empty() {
            answered = true;
            match parse_response(&mut conn.buf, &mut conn.fields).map_err(|f| failed(f, false))? {
                // Interim responses (100 Continue and the like) are not the answer.
                Some(p) if is_interim(p.status.as_u16()) => continue,
                Some(p) => break p,
                None => {}
            }
        }
        let fault = match conn.fill().await {
            Ok(0) => BackendFault::Closed,
            Ok(_) => continue,
            Err(e) => BackendFault::Io(e),
        };
        let closed = match &fault {
            BackendFault::Closed => true,
            BackendFault::Io(e) => e.kind() == io::ErrorKind::ConnectionReset,
            BackendFault::Malformed(_) => false,
        };
        let silent = closed && !answered;
        return Err(Failure { fault, unsent: false, silent });
    };
    let (framing, keep_alive) =
        response_framing(&req.method, upgrade, &parts, &conn.fields).map_err(|f| failed(f, false))?;
    // A connection whose request body was cut short by an early response has lost its framing.
    let keep_alive = keep_alive && complete && !upgrade;
    Ok(Response::from_parts(parts, ResponseBody::new(conn, framing, keep_alive)))
}

/// Writes the request body (chunked or as it comes); true once it was sent whole, false when
/// the backend answered before it ended (the rest is not sent).
async fn send_body<B>(conn: &mut Conn, body: &mut B, chunked: bool) -> Result<bool, BackendFault>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    enum Next<D, E> {
        Backend(io::Result<usize>),
        Frame(Option<Result<Frame<D>, E>>),
    }
    loop {
        // Biased: a backend that answers early (an error, 413) is heard before more is sent.
        let next = tokio::select! {
            biased;
            r = conn.fill() => Next::Backend(r),
            f = body.frame() => Next::Frame(f),
        };
        match next {
            Next::Backend(Ok(0)) => return Err(BackendFault::Closed),
            Next::Backend(Err(e)) => return Err(BackendFault::Io(e)),
            Next::Backend(Ok(_)) => {
                if answer_begun(&mut conn.buf) {
                    return Ok(false);
                }
            }
            // The last chunk too may wait on a backend that answered and stopped reading.
            Next::Frame(None) if chunked => return write_until_answered(conn, &[b"0\r\n\r\n"]).await,
            Next::Frame(None) => return Ok(true),
            // The client's body failed; the caller finds out whose fault it was.
            Next::Frame(Some(Err(e))) => {
                return Err(BackendFault::Io(io::Error::other(format!("request body: {e}"))));
            }
            Next::Frame(Some(Ok(frame))) => {
                // Trailers of a request are not forwarded.
                let Ok(data) = frame.into_data() else { continue };
                if data.is_empty() {
                    continue;
                }
                let sent = if chunked {
                    let size = format!("{:x}\r\n", data.len());
                    write_until_answered(conn, &[size.as_bytes(), &data, b"\r\n"]).await?
                } else {
                    write_until_answered(conn, &[&data]).await?
                };
                if !sent {
                    return Ok(false);
                }
            }
        }
    }
}

/// Writes `parts` of the request body and flushes them: true once written, false when the
/// backend's answer began first. A backend that answers early (413) may stop reading: a write
/// that waits on its full socket would then wait for ever, so the answer is listened for
/// while the write waits, not only between writes.
async fn write_until_answered(conn: &mut Conn, parts: &[&[u8]]) -> Result<bool, BackendFault> {
    let (mut part, mut at) = (0, 0);
    std::future::poll_fn(|cx| {
        loop {
            match conn.poll_fill(cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(BackendFault::Closed)),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(BackendFault::Io(e))),
                Poll::Ready(Ok(_)) if answer_begun(&mut conn.buf) => return Poll::Ready(Ok(false)),
                Poll::Ready(Ok(_)) => continue,
                Poll::Pending => {}
            }
            let Some(bytes) = parts.get(part) else {
                return std::pin::Pin::new(&mut conn.stream)
                    .poll_flush(cx)
                    .map(|r| r.map(|()| true).map_err(BackendFault::Io));
            };
            if at == bytes.len() {
                (part, at) = (part + 1, 0);
                continue;
            }
            match std::pin::Pin::new(&mut conn.stream).poll_write(cx, &bytes[at..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(BackendFault::Io(io::ErrorKind::WriteZero.into()))),
                Poll::Ready(Ok(n)) => at += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(BackendFault::Io(e))),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await
}

/// Whether what the backend sent while the request body was going out is (the start of) its
/// answer, not only interim responses.
fn answer_begun(buf: &mut BytesMut) -> bool {
    buf.len() >= MAX_RESPONSE_HEAD || final_response_begun(buf)
}

/// An interim response (100 Continue and the like), not the answer; 101 is a final one.
fn is_interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}

/// Drops complete interim heads (100 Continue) off the front of `buf`; true once what remains
/// is the start of a final response (or something the response parser will reject).
fn final_response_begun(buf: &mut BytesMut) -> bool {
    loop {
        let interim = |code: Option<u16>| code.is_some_and(is_interim);
        let step = {
            let mut fields = [httparse::EMPTY_HEADER; 16];
            let mut resp = httparse::Response::new(&mut fields);
            match resp.parse(buf) {
                Ok(httparse::Status::Complete(n)) if interim(resp.code) => Some(n),
                Ok(httparse::Status::Partial) if buf.is_empty() || resp.code.is_none() || interim(resp.code) => {
                    return false;
                }
                _ => return true,
            }
        };
        if let Some(n) = step {
            bytes::Buf::advance(buf, n);
        }
    }
}
