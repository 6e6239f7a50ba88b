//! Serving an h2 client connection (ALPN h2, or h2c with prior knowledge) with the h2 crate:
//! below `server` (which serves TLS connections that chose h2) and `h1` (which hands on a
//! plain connection that opens with the h2 preface). hyper's h2 server did this before; the
//! h2 crate served directly takes fewer instructions a request (docs/benchmarks.md). This
//! drives the connection and its streams (`h2_stream`), in the connection's own task.
use std::future::Future;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::h2::Reason;
use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};

use super::conn::ConnCtx;
use super::h2_ping::keep_alive;
use super::h2_socket::ClientSocket;
use super::h2_stream::serve_stream;
use crate::config::H2_WINDOW_BYTES;
use crate::shutdown::Tasks;
use crate::vip::Vip;

/// As hyper's h2 server had them: frames of up to 16 KiB, and up to 400 KiB of a connection's
/// responses queued for the socket. (The windows are `limits.h2_window_bytes`.)
const MAX_FRAME: u32 = 16 * 1024;
const MAX_SEND_BUFFER: usize = 400 * 1024;
/// Streams a client may make the proxy reset (malformed requests) before the connection is
/// closed: hyper's bound, against clients that make the server do the work of resets.
const MAX_LOCAL_RESETS: usize = 1024;

/// Serves an h2 connection (ALPN h2, or h2c with prior knowledge).
pub(crate) async fn serve_h2<S>(stream: S, client: SocketAddr, vip: &Arc<Vip>, tasks: Tasks, https: bool)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let opts = &vip.spec.options;
    let ctx = ConnCtx::new(vip, client, https);
    // Checked against the range where the configuration is read; kept in it here too, as the
    // h2 crate panics beyond it.
    let window = opts.limits.h2_window_bytes.clamp(*H2_WINDOW_BYTES.start(), *H2_WINDOW_BYTES.end());
    let mut b = ::h2::server::Builder::new();
    b.initial_window_size(window)
        .initial_connection_window_size(window)
        .max_frame_size(MAX_FRAME)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_local_error_reset_streams(Some(MAX_LOCAL_RESETS))
        .max_concurrent_streams(opts.limits.h2_max_streams)
        .max_header_list_size(opts.limits.max_header_bytes.min(u32::MAX as usize) as u32);
    // Extended CONNECT (RFC 8441) stays off, as it was with hyper: a request with :protocol
    // is refused by the h2 crate itself.
    // The preface is a client's first bytes: one that does not send them within the head
    // timeout is a slow-loris, as an HTTP/1 client that does not send its head.
    // Its reads noted for the keep-alive ping; the responses answered in one turn of the
    // worker leave in one write (`h2_socket`).
    let (stream, heard) = ClientSocket::new(stream);
    let handshake = tokio::select! {
        biased;
        r = tokio::time::timeout(opts.timeouts.client_header, b.handshake::<_, Bytes>(stream)) => r,
        _ = tasks.force.raised() => return,
    };
    let mut conn = match handshake {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return log_end(e),
        Err(_) => return tracing::debug!(client = %client, "an h2 client sent no preface in time"),
    };
    // A silent peer is found by pings; one that stays silent is dropped.
    let pinging = keep_alive(conn.ping_pong(), heard, opts.timeouts.idle, opts.timeouts.client_header);
    // Made once, not at every turn of the loop: each registers with its signal's waiters.
    let (stop, force) = (tasks.stop.raised(), tasks.force.raised());
    tokio::pin!(pinging, stop, force);
    let mut stopping = false;
    // The streams, polled here (each only when woken) rather than each in a task of its own:
    // no spawn, no task's state changes or wake-ups across tasks, no shared count on the
    // context (docs/benchmarks.md).
    let mut streams = FuturesUnordered::new();
    loop {
        let next = tokio::select! {
            biased;
            // The streams first: what they send is written by the connection's poll below.
            Some(()) = streams.next(), if !streams.is_empty() => continue,
            r = conn.accept() => r,
            () = stop.as_mut(), if !stopping => {
                // GOAWAY: the streams open go on, no new one is taken.
                stopping = true;
                conn.graceful_shutdown();
                continue;
            }
            () = force.as_mut(), if stopping => return,
            () = pinging.as_mut() => {
                tracing::debug!(client = %client, "an h2 client answered no ping: closing");
                conn.abrupt_shutdown(Reason::NO_ERROR);
                // The GOAWAY is sent if the socket takes it; a peer that reads nothing does
                // not hold the connection longer than another ping's wait.
                let _ = tokio::time::timeout(opts.timeouts.client_header, closed(&mut conn)).await;
                return;
            }
        };
        match next {
            // Boxed: a pointer is cheaper to move into the set than a request's state machine.
            Some(Ok((req, respond))) => streams.push(Isolated(Box::pin(serve_stream(req, respond, &ctx)))),
            Some(Err(e)) => return log_end(e),
            None => return,
        }
    }
}

/// A stream whose fault (a panic) ends that stream alone, as a task of its own would: its
/// handles are dropped, which resets it, and the connection's other streams go on.
struct Isolated<F>(Pin<Box<F>>);

impl<F: Future<Output = ()>> Future for Isolated<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // The panic was reported by the panic hook already.
        catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))).unwrap_or(Poll::Ready(()))
    }
}

/// Drives the connection until it is closed (after a shutdown was asked for).
async fn closed<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut ::h2::server::Connection<S, Bytes>) {
    while let Some(Ok(_)) = conn.accept().await {}
}

fn log_end(e: ::h2::Error) {
    tracing::debug!(error = %e, "client connection ended with an error");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_that_panics_ends_alone() {
        let mut stream = Isolated(Box::pin(async { panic!("a fault in one stream's code") }));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert_eq!(Pin::new(&mut stream).poll(&mut cx), Poll::Ready(()));
    }
}
