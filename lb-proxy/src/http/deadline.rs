//! Deadlines of an HTTP/1 client connection, kept at the byte level because hyper's own
//! header timer starts as soon as it waits for the next request (so it would govern idle
//! keep-alive time too) and closes without a word:
//! - between requests, the connection may stay idle for `idle`, then it is closed;
//! - from the first byte of a head, the client has `client_header` to finish it, then it is
//!   answered `408 Request Timeout` and closed (a slow-loris client learns why);
//! - on a new connection the first head must be complete within `client_header`.
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::shared::ConnShared;
use super::sniff::{Phase, Sniffer};
use crate::outlier::now_ms;
use crate::vip::Vip;

pub(crate) const TIMEOUT_RESPONSE: &[u8] = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\ncontent-length: 20\r\nconnection: close\r\n\r\n408 Request Timeout\n";

pub(crate) struct ClientIo<T> {
    inner: Sniffer<T>,
    shared: Arc<ConnShared>,
    idle: Duration,
    client_header: Duration,
    /// When the head being read started (ms), if one is.
    head_started_ms: Option<u64>,
    timer: Option<Pin<Box<Sleep>>>,
    /// The deadline (ms) `timer` is set to: re-arming the timer for every read that waits
    /// would take it out of tokio's timer wheel and put it back each time.
    armed_ms: Option<u64>,
    /// Counts the 408s (before the client can see one).
    vip: Arc<Vip>,
}

enum Expiry {
    /// Close quietly (idle keep-alive connection, or nothing ever sent).
    Close,
    /// Answer 408, then close.
    RequestTimeout,
}

impl<T> ClientIo<T> {
    pub(crate) fn new(inner: Sniffer<T>, shared: Arc<ConnShared>, vip: Arc<Vip>) -> Self {
        let timeouts = &vip.spec.options.timeouts;
        let (idle, client_header) = (timeouts.idle, timeouts.client_header);
        ClientIo { vip, inner, shared, idle, client_header, head_started_ms: None, timer: None, armed_ms: None }
    }

    /// The deadline that applies now (ms), and what happens when it passes.
    fn deadline(&self) -> Option<(u64, Expiry)> {
        if self.shared.is_upgraded() {
            return None;
        }
        let idle_since = self.shared.idle_since()?;
        let ms = |d: Duration| d.as_millis() as u64;
        match self.inner.phase() {
            Phase::Between if self.inner.heads() == 0 => Some((idle_since + ms(self.client_header), Expiry::Close)),
            Phase::Between => Some((idle_since + ms(self.idle), Expiry::Close)),
            Phase::InHead => {
                let from = self.head_started_ms.unwrap_or(idle_since).max(idle_since);
                let from = if self.inner.heads() == 0 { idle_since } else { from };
                Some((from + ms(self.client_header), Expiry::RequestTimeout))
            }
            Phase::Other => None,
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for ClientIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                match this.inner.phase() {
                    Phase::InHead if buf.filled().len() > before => {
                        this.head_started_ms.get_or_insert_with(now_ms);
                    }
                    Phase::InHead => {}
                    _ => this.head_started_ms = None,
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        if this.shared.is_busy() {
            // Registered before the deadline is read again: the end of the last request
            // cannot slip between the two.
            this.shared.wake_when_idle(cx.waker());
        }
        let Some((deadline_ms, expiry)) = this.deadline() else {
            return Poll::Pending;
        };
        let armed = match this.armed_ms {
            Some(armed) if armed == deadline_ms => this.timer.as_mut(),
            _ => {
                let now = now_ms();
                if deadline_ms > now {
                    let at = Instant::now() + Duration::from_millis(deadline_ms - now);
                    let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                    timer.as_mut().reset(at);
                    this.armed_ms = Some(deadline_ms);
                    Some(timer)
                } else {
                    None
                }
            }
        };
        if let Some(timer) = armed
            && timer.as_mut().poll(cx).is_pending()
        {
            return Poll::Pending;
        }
        match expiry {
            // End of stream between requests: hyper closes the connection cleanly.
            Expiry::Close => Poll::Ready(Ok(())),
            Expiry::RequestTimeout => {
                this.vip.counters.client_timeouts.fetch_add(1, Relaxed);
                // Best effort: the send buffer of a connection waiting for a head is empty.
                let _ = Pin::new(this.inner.inner_mut()).poll_write(cx, TIMEOUT_RESPONSE);
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "request head not complete in time")))
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ClientIo<T> {
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
