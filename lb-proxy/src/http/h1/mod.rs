//! Serving an HTTP/1 client connection: one task reads each request head, forwards the request
//! (its body read from the client as the backend takes it), writes the response and goes on
//! to the next, as nginx does, without a second parse or a hand-over between tasks. Deadlines:
//! - a new connection must send its first head whole within `client_header`;
//! - between requests the connection may stay idle for `idle`, then it is closed;
//! - from the first byte of a later head, the client has `client_header` to finish it;
//! - a client that takes no byte of what is written to it for `send` loses the connection;
//!
//! a head not finished in time is answered `408 Request Timeout` (a slow-loris client learns
//! why). On stop, the request in progress is finished and the connection closed.
mod body;
mod prefixed;
mod request;
mod response;
mod send;
mod spare;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use self::body::{ClientBody, Reader, SharedReader, Writer, lock};
use self::request::Framing;
pub(crate) use self::response::date_value;
use self::send::SendTimeout;
use super::conn::ConnCtx;
use super::decode::Decoder;
use super::forward::handle;
use super::respond::{TIMEOUT_RESPONSE, error_response};
use crate::kept_timer::KeptTimer;
use crate::shutdown::{Raised, Tasks};
use crate::vip::Vip;

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How reading the next head ended.
// Returned once per request and matched at once: boxing the head would cost an allocation each.
#[allow(clippy::large_enum_variant)]
enum Next {
    Head(request::Head),
    /// The client closed, stayed idle too long, or the proxy is stopping: close quietly.
    Close,
    /// Refused with this status (framing, syntax, limits), then closed.
    Refuse(StatusCode),
    /// The head was not finished in time: 408, then closed.
    TimedOut,
}

/// Serves an HTTP/1 client connection until it ends. The caller drops it at a forced stop
/// (`shutdown::until`), wherever it is. Owns its VIP, so that a plain connection's task can be
/// this future itself, built in its box (`accept`).
pub(crate) async fn serve<S>(stream: S, client: SocketAddr, vip: Arc<Vip>, tasks: Tasks, https: bool)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let vip = &vip;
    let opts = &vip.spec.options;
    let ctx = ConnCtx::new(vip, client, https);
    let (read_buf, mut out) = spare::take();
    let reader: SharedReader<_> = Arc::new(Mutex::new(Reader::new(stream, read_buf)));
    let mut wr = SendTimeout::new(Writer(reader.clone()), opts.timeouts.send);
    // The connection's one timer for head deadlines.
    let mut timer = KeptTimer::new();
    let stop = tasks.stop.clone();
    // One waiter for the connection's life: made anew for every wait, it would join and leave
    // the signal's waiter list (behind a lock) for every request.
    let stopping = stop.raised();
    tokio::pin!(stopping);
    // A plain connection may open with the h2 preface (h2c with prior knowledge); over TLS,
    // ALPN has decided.
    if !https {
        match opening(&reader, &mut timer, vip, stopping.as_mut()).await {
            Opening::Http1 => {}
            Opening::Closed => return,
            Opening::H2 => {
                let Some((stream, read)) = reclaim(reader, wr) else { return };
                let stream = prefixed::Prefixed::new(read, stream);
                return Box::pin(super::h2::serve_h2(stream, client, vip, tasks, false)).await;
            }
        }
    }
    let mut first = true;
    loop {
        let head = match next_head(&reader, &mut timer, first, vip, stopping.as_mut()).await {
            Next::Head(head) => head,
            Next::Close => break,
            Next::TimedOut => {
                vip.counters.client_timeouts.fetch_add(1, Relaxed);
                let _ = wr.write_all(TIMEOUT_RESPONSE).await;
                break;
            }
            Next::Refuse(status) => {
                vip.counters.rejected.fetch_add(1, Relaxed);
                vip.counters.client_errors.fetch_add(1, Relaxed);
                let asked = response::Asked { head: false, version: http::Version::HTTP_11, keep_alive: false };
                let _ = response::write(&mut wr, &mut out, error_response(status, true), &asked).await;
                break;
            }
        };
        first = false;
        let decoder = match head.framing {
            Framing::None => Decoder::length(0),
            Framing::Length(n) => Decoder::length(n),
            Framing::Chunked => Decoder::chunked(),
        };
        lock(&reader).body_done = decoder.is_done();
        // A body already known to be too large is refused (413) without asking for it.
        let too_large = opts.limits.body_too_large(decoder.exact());
        if head.expects_continue && !too_large && wr.write_all(CONTINUE).await.is_err() {
            break;
        }
        let asked = response::Asked {
            head: head.parts.method == Method::HEAD,
            version: head.parts.version,
            keep_alive: head.keep_alive && !opts.close_after_response,
        };
        let body = ClientBody::new(reader.clone(), decoder);
        let answered = {
            // Pinned here, in this task's own state: moved into the watcher it would be stored
            // twice. In its own block, so the response's writing reuses its room.
            let served = std::pin::pin!(handle(head.parts, head.fields, body, &ctx));
            unless_client_leaves(served, &reader, opts.limits.max_header_bytes).await
        };
        let Some(mut resp) = answered else {
            // Gone before its answer: the backend request is dropped with the future.
            return;
        };
        let tunnel =
            if resp.status() == StatusCode::SWITCHING_PROTOCOLS { resp.body_mut().take_tunnel() } else { None };
        let kept = match response::write(&mut wr, &mut out, resp, &asked).await {
            Ok(keep) => keep,
            Err(e) if wr.timed_out() => {
                // The client stopped reading: the backend's side of the exchange is dropped
                // with the response, and the connection with this task.
                tracing::debug!(client = %client, error = %e, "client stopped reading its response");
                vip.counters.client_timeouts.fetch_add(1, Relaxed);
                return;
            }
            Err(e) => {
                tracing::debug!(client = %client, error = %e, "response not sent whole");
                false
            }
        };
        if let Some(tunnel) = tunnel {
            // The request is over on this side: its body, and with it the reader's other
            // handle, has been dropped.
            let Some((client_stream, pending)) = reclaim(reader, wr) else {
                tracing::debug!(client = %client, "client reader still shared at upgrade");
                return;
            };
            super::upgrade::run_tunnel(client_stream, pending, tunnel, opts.timeouts.tunnel).await;
            return;
        }
        // A body left unread leaves the next request's start unknown.
        if !kept || !lock(&reader).body_done || stop.is_raised() {
            break;
        }
    }
    spare::give_back(std::mem::take(&mut lock(&reader).buf), out);
    let _ = wr.shutdown().await;
}

/// Runs `served` to its end, unless the client closes its connection first: then the request
/// (and whatever it holds at the backend) is dropped. Watched while the request's body has
/// been read whole (a bodiless request at once); bytes the client sends meanwhile (a
/// pipelined request) stay buffered, up to a head's worth.
async fn unless_client_leaves<F: Future, R: AsyncRead + Unpin>(
    mut served: Pin<&mut F>,
    reader: &SharedReader<R>,
    most: usize,
) -> Option<F::Output> {
    loop {
        let watch = {
            let r = lock(reader);
            r.body_done && r.buf.len() < most
        };
        tokio::select! {
            biased;
            out = served.as_mut() => return Some(out),
            more = read_more(reader), if watch => if !more {
                return None;
            },
        }
    }
}

/// Reads more of the client's bytes into the shared buffer: false once the client closed (or
/// the read failed).
async fn read_more<R: AsyncRead + Unpin>(reader: &SharedReader<R>) -> bool {
    matches!(std::future::poll_fn(|cx| lock(reader).poll_fill(cx)).await, Ok(n) if n > 0)
}

/// The whole client stream again, with what was read of it and not yet taken; None while a
/// request body still holds the reader.
fn reclaim<S: AsyncRead + AsyncWrite + Unpin>(
    reader: SharedReader<S>,
    wr: SendTimeout<Writer<S>>,
) -> Option<(S, bytes::BytesMut)> {
    // The writer holds the other handle of the stream's own.
    drop(wr);
    let reader = Arc::try_unwrap(reader).ok()?;
    Some(reader.into_inner().unwrap_or_else(|e| e.into_inner()).into_inner())
}

enum Opening {
    Http1,
    H2,
    /// Gone or silent before a first byte that decides: closed quietly.
    Closed,
}

/// How a plain connection opens, read within the first head's time: most first reads hold a
/// whole HTTP/1 head, and decide at once.
async fn opening<R: AsyncRead + Unpin>(
    reader: &SharedReader<R>,
    timer: &mut KeptTimer,
    vip: &Vip,
    mut stopping: Pin<&mut Raised<'_>>,
) -> Opening {
    let mut deadline = Deadline::after(vip.spec.options.timeouts.client_header);
    loop {
        {
            let r = lock(reader);
            let n = r.buf.len().min(H2_PREFACE.len());
            if r.buf[..n] != H2_PREFACE[..n] {
                return Opening::Http1;
            }
            if n == H2_PREFACE.len() {
                return Opening::H2;
            }
        }
        match more_bytes(reader, timer, &mut deadline, stopping.as_mut(), true).await {
            Waited::Bytes => {}
            Waited::Closed | Waited::Expired | Waited::Stopping => return Opening::Closed,
        }
    }
}

/// Reads until a whole request head is in, under the head deadlines.
async fn next_head<R: AsyncRead + Unpin>(
    reader: &SharedReader<R>,
    timer: &mut KeptTimer,
    first: bool,
    vip: &Vip,
    mut stopping: Pin<&mut Raised<'_>>,
) -> Next {
    let t = &vip.spec.options.timeouts;
    // The first head's time starts with the connection; a later one's idle time with the end
    // of the last response, its head time with its own first byte (each as it is first waited
    // for, which is at once).
    let mut deadline = Deadline::after(if first { t.client_header } else { t.idle });
    let mut in_head = false;
    loop {
        {
            let mut r = lock(reader);
            if !r.buf.is_empty() {
                match request::parse(&mut r.buf, &vip.spec.options.limits) {
                    Ok(Some(head)) => return Next::Head(head),
                    Ok(None) => {}
                    Err(status) => return Next::Refuse(status),
                }
                if !in_head {
                    in_head = true;
                    if !first {
                        deadline = Deadline::after(t.client_header);
                    }
                }
            }
        }
        // Stopping: a connection between requests is closed now; a head begun is finished.
        match more_bytes(reader, timer, &mut deadline, stopping.as_mut(), !in_head).await {
            Waited::Bytes => {}
            Waited::Expired if in_head => return Next::TimedOut,
            Waited::Closed | Waited::Expired | Waited::Stopping => return Next::Close,
        }
    }
}

enum Waited {
    Bytes,
    /// The client closed (or the read failed).
    Closed,
    Expired,
    Stopping,
}

/// Waits for the client's next bytes, the deadline, or (if `stoppable`) the proxy's stop.
async fn more_bytes<R: AsyncRead + Unpin>(
    reader: &SharedReader<R>,
    timer: &mut KeptTimer,
    deadline: &mut Deadline,
    stopping: Pin<&mut Raised<'_>>,
    stoppable: bool,
) -> Waited {
    tokio::select! {
        biased;
        more = read_more(reader) => if more { Waited::Bytes } else { Waited::Closed },
        _ = timer.until(|| deadline.at()) => Waited::Expired,
        _ = stopping, if stoppable => Waited::Stopping,
    }
}

/// A head deadline, `after` from when it is first waited for: most heads are whole when the
/// wait for them would begin (a new connection's first read holds its first head), and then
/// no clock is read for them.
struct Deadline {
    after: Duration,
    at: Option<Instant>,
}

impl Deadline {
    fn after(after: Duration) -> Deadline {
        Deadline { after, at: None }
    }

    fn at(&mut self) -> Instant {
        *self.at.get_or_insert_with(|| Instant::now() + self.after)
    }
}
