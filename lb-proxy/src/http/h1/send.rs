//! The write side of an HTTP/1 client connection, under a send timeout (nginx's
//! `send_timeout`): a client that takes no byte of its response for `timeouts.send` loses the
//! connection, so a client that stops reading (a slow-read attack, a stuck peer) cannot hold
//! the proxy's buffers and its backend connection for ever. The timer is armed only once a
//! write has to wait (most responses fit the socket's buffer and pay nothing) and pushed back
//! by every write that goes through.
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::AsyncWrite;

use crate::http::idle::IdleTimer;

pub(crate) struct SendTimeout<W> {
    inner: W,
    timer: IdleTimer,
    timed_out: bool,
}

impl<W> SendTimeout<W> {
    pub(crate) fn new(inner: W, limit: Duration) -> Self {
        SendTimeout { inner, timer: IdleTimer::new(limit), timed_out: false }
    }

    /// Whether a write gave up because the client took nothing for the send timeout.
    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// The outcome of one write-side call: progress pushes the timer back; waiting checks it.
    fn watch<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(r) => {
                self.timer.activity();
                Poll::Ready(r)
            }
            Poll::Pending if self.timer.expired(cx) => {
                self.timed_out = true;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client took no byte for the send timeout",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for SendTimeout<W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_stops_ends_the_write_and_one_that_reads_does_not() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut w = SendTimeout::new(near, Duration::from_secs(5));
        // Fits the pipe: no wait, no timer.
        w.write_all(&[1; 64]).await.unwrap();
        assert!(!w.timed_out());
        // The far end reads 16 bytes every 4 s, within the 5 s limit each time: never cut.
        let slow_reader = tokio::spawn(async move {
            let mut got = 0;
            let mut byte = [0; 16];
            while got < 64 + 160 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                got += far.read(&mut byte).await.unwrap();
            }
            far
        });
        w.write_all(&[2; 160]).await.unwrap();
        assert!(!w.timed_out());
        let far = slow_reader.await.unwrap();
        // The far end stops reading: the write that must wait gives up after the limit.
        w.write_all(&[3; 64]).await.unwrap();
        let started = tokio::time::Instant::now();
        let e = w.write_all(&[4; 1]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(w.timed_out());
        let waited = started.elapsed();
        assert!(waited >= Duration::from_secs(5) && waited < Duration::from_secs(6), "{waited:?}");
        drop(far);
    }
}
