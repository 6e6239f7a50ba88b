//! The keep-alive ping of h2 client connections, as hyper's server had it: a PING once an
//! `interval` went by in which nothing was read from the peer, and a peer that answers none
//! within `timeout` is taken for gone (a client whose network went away sends no FIN, and its
//! connection would hold its place for ever). A peer heard from is there: a busy connection
//! is not pinged.
use std::future::{pending, poll_fn};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use ::h2::{Ping, PingPong};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Resolves when the peer left a ping unanswered for `timeout`; never while it answers, nor
/// once the connection has ended (the connection's own loop sees that).
pub(crate) async fn keep_alive(pings: Option<PingPong>, heard: Arc<AtomicBool>, interval: Duration, timeout: Duration) {
    // Taken once per connection: absent only if taken before.
    let Some(mut pings) = pings else { return pending().await };
    loop {
        tokio::time::sleep(interval).await;
        if heard.swap(false, Relaxed) {
            continue;
        }
        if pings.send_ping(Ping::opaque()).is_err() {
            return pending().await;
        }
        match tokio::time::timeout(timeout, poll_fn(|cx| pings.poll_pong(cx))).await {
            // The answer itself is no news of the peer: the next interval starts silent.
            Ok(Ok(_)) => heard.store(false, Relaxed),
            // The connection has ended.
            Ok(Err(_)) => return pending().await,
            Err(_) => return,
        }
    }
}

/// A client connection's socket that notes each read that brought bytes (`keep_alive` reads
/// and clears the note): the h2 crate tells of no frame it handles itself.
pub(crate) struct NoteReads<S> {
    io: S,
    heard: Arc<AtomicBool>,
}

impl<S> NoteReads<S> {
    pub(crate) fn new(io: S) -> (Self, Arc<AtomicBool>) {
        let heard = Arc::new(AtomicBool::new(false));
        (NoteReads { io, heard: heard.clone() }, heard)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for NoteReads<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.heard.store(true, Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for NoteReads<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
