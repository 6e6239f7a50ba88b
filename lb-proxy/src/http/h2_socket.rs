//! An h2 client connection's socket: each read that brings bytes is noted for the keep-alive
//! ping (`h2_ping`: the h2 crate tells of no frame it handles itself), and writes are gathered
//! until the end of the worker's turn.
//!
//! The h2 crate hands its socket a response body of 256 bytes or more as a payload of its own
//! and writes it out before it takes the next frame: every response of a few KiB was one
//! `writev` (one per request on the h2 workload of `cargo xtask bench proxy`, where HAProxy
//! makes one write for several). On loopback, and on a busy host, a write is most of what a
//! small response costs the proxy. This socket takes the crate's small writes into a buffer of
//! its own, and a flush that finds bytes there waits for the end of the worker's turn (the
//! runtime's next look at its sockets, after the tasks it has woken have run): the responses of
//! every stream that was answered in that turn then leave in one write. The wait is one pass
//! of the worker's task queue, not a timer. A write too large to gather goes out at once,
//! behind what was gathered, in the same call.
use std::io::{self, IoSlice};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker, ready};

use bytes::{Buf, BytesMut};
use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes gathered before they are written at once: a few responses' worth. A larger write
/// (a body's 16 KiB frames) is not copied.
const GATHER_LIMIT: usize = 16 * 1024;
/// Slices of one write: what was gathered, then the crate's (two: its frames, a payload).
const MAX_SLICES: usize = 8;

pub(crate) struct ClientSocket<S> {
    io: S,
    /// Set at each read that brought bytes; `h2_ping::keep_alive` reads and clears it.
    heard: Arc<AtomicBool>,
    /// Accepted from the h2 crate, not yet written.
    gathered: BytesMut,
    flush: Flush,
    turn: Arc<TurnEnd>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flush {
    /// Nothing asked for.
    Idle,
    /// A flush waits for the end of the turn.
    AtTurnEnd,
    /// Writing the gathered bytes out, until they are all written.
    Writing,
}

/// Told (by the runtime's deferred wake-up) when the worker's turn has ended, and wakes the
/// connection's task then.
#[derive(Default)]
struct TurnEnd {
    ended: AtomicBool,
    task: AtomicWaker,
}

impl Wake for TurnEnd {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ended.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<S> ClientSocket<S> {
    /// The socket, and the note of its reads for `h2_ping::keep_alive`.
    pub(crate) fn new(io: S) -> (Self, Arc<AtomicBool>) {
        let heard = Arc::new(AtomicBool::new(false));
        let socket = ClientSocket {
            io,
            heard: heard.clone(),
            gathered: BytesMut::new(),
            flush: Flush::Idle,
            turn: Arc::default(),
        };
        (socket, heard)
    }

    /// Asks to be woken when the worker's turn ends: `yield_now` defers its wake-up until the
    /// runtime has looked at its sockets (outside a runtime it wakes at once).
    fn wait_for_turn_end(&mut self, cx: &mut Context<'_>) {
        self.turn.ended.store(false, Ordering::Relaxed);
        self.turn.task.register(cx.waker());
        let waker = Waker::from(self.turn.clone());
        // The first poll of `yield_now` hands the waker on and returns Pending; the future
        // itself is not needed after that.
        let _ = pin!(tokio::task::yield_now()).poll(&mut Context::from_waker(&waker));
    }
}

impl<S: AsyncWrite + Unpin> ClientSocket<S> {
    /// Writes `bufs` behind what was gathered, in one call where the socket takes it: the
    /// count of `bufs`' bytes written (Ready only once what was gathered is all written).
    fn write_through(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        loop {
            if self.gathered.is_empty() {
                return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
            }
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            slices[0] = IoSlice::new(&self.gathered);
            let count = 1 + bufs.len().min(MAX_SLICES - 1);
            slices[1..count].copy_from_slice(&bufs[..count - 1]);
            let n = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &slices[..count]))?;
            if n == 0 {
                return Poll::Ready(Ok(0));
            }
            let mine = self.gathered.len();
            if n < mine {
                self.gathered.advance(n);
                continue;
            }
            self.gathered.clear();
            if n > mine || bufs.iter().all(|b| b.is_empty()) {
                return Poll::Ready(Ok(n - mine));
            }
        }
    }

    /// Writes out what was gathered.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.gathered.is_empty() {
            if ready!(self.write_through(cx, &[]))? == 0 && !self.gathered.is_empty() {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ClientSocket<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.heard.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ClientSocket<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if self.flush != Flush::Writing && self.gathered.len() + total <= GATHER_LIMIT {
            for b in bufs {
                self.gathered.extend_from_slice(b);
            }
            return Poll::Ready(Ok(total));
        }
        self.write_through(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.gathered.is_empty() {
            match self.flush {
                Flush::Idle => {
                    self.wait_for_turn_end(cx);
                    self.flush = Flush::AtTurnEnd;
                    return Poll::Ready(Ok(()));
                }
                // Still in the turn: the wake-up at its end polls the connection again, and
                // the connection flushes again then.
                Flush::AtTurnEnd if !self.turn.ended.load(Ordering::Acquire) => return Poll::Ready(Ok(())),
                Flush::AtTurnEnd | Flush::Writing => {
                    self.flush = Flush::Writing;
                    ready!(self.drain(cx))?;
                }
            }
        }
        self.flush = Flush::Idle;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.flush = Flush::Writing;
        ready!(self.drain(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A socket that takes every write whole and keeps each call's bytes apart.
    #[derive(Default)]
    struct Calls(Vec<Vec<u8>>);

    impl AsyncWrite for Calls {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            self.0.push(bufs.iter().flat_map(|b| b.iter().copied()).collect());
            Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn write_and_flush(w: &mut ClientSocket<Calls>, cx: &mut Context<'_>, bytes: &[u8]) {
        assert!(matches!(Pin::new(&mut *w).poll_write(cx, bytes), Poll::Ready(Ok(n)) if n == bytes.len()));
        assert!(matches!(Pin::new(&mut *w).poll_flush(cx), Poll::Ready(Ok(()))));
    }

    #[tokio::test]
    async fn what_one_turn_flushes_leaves_in_one_write_when_the_turn_ends() {
        let mut w = ClientSocket::new(Calls::default()).0;
        let mut polls = 0;
        // Nothing but the end of the turn wakes this future again: without that wake-up it
        // would wait for ever, and the timeout fails the test.
        let written = poll_fn(|cx| {
            polls += 1;
            if polls == 1 {
                for response in [&b"first "[..], b"second ", b"third"] {
                    write_and_flush(&mut w, cx, response);
                }
                assert!(w.io.0.is_empty(), "nothing is written within the turn");
                return Poll::Pending;
            }
            assert!(matches!(Pin::new(&mut w).poll_flush(cx), Poll::Ready(Ok(()))));
            Poll::Ready(w.io.0.clone())
        });
        let written = tokio::time::timeout(Duration::from_secs(10), written).await.expect("woken at the turn's end");
        assert_eq!(written, vec![b"first second third".to_vec()]);
    }

    #[tokio::test]
    async fn a_large_write_leaves_at_once_behind_what_was_gathered() {
        let mut w = ClientSocket::new(Calls::default()).0;
        let large = vec![7u8; GATHER_LIMIT];
        poll_fn(|cx| {
            write_and_flush(&mut w, cx, b"head");
            let bufs = [IoSlice::new(b"frame"), IoSlice::new(&large)];
            let r = Pin::new(&mut w).poll_write_vectored(cx, &bufs);
            assert!(matches!(r, Poll::Ready(Ok(n)) if n == 5 + large.len()));
            Poll::Ready(())
        })
        .await;
        assert_eq!(w.io.0, vec![[&b"headframe"[..], &large].concat()]);
    }

    #[tokio::test]
    async fn shutdown_writes_what_was_gathered() {
        let mut w = ClientSocket::new(Calls::default()).0;
        poll_fn(|cx| {
            write_and_flush(&mut w, cx, b"goaway");
            Poll::Ready(())
        })
        .await;
        w.shutdown().await.unwrap();
        assert_eq!(w.io.0, vec![b"goaway".to_vec()]);
    }

    #[tokio::test]
    async fn a_socket_that_takes_little_at_a_time_gets_every_byte_in_order() {
        // A pipe that holds 100 bytes: writes are taken in part, and wait for the reader.
        let (near, mut far) = tokio::io::duplex(100);
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            far.read_to_end(&mut all).await.map(|_| all)
        });
        let mut w = ClientSocket::new(near).0;
        let mut sent = Vec::new();
        for i in 0..200u32 {
            // Small writes gathered, and now and then one too large to gather.
            let len = if i % 50 == 49 { GATHER_LIMIT + 3 } else { 1 + (i as usize * 37) % 900 };
            let bytes: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
            w.write_all(&bytes).await.unwrap();
            w.flush().await.unwrap();
            sent.extend_from_slice(&bytes);
        }
        w.shutdown().await.unwrap();
        drop(w);
        assert!(reader.await.unwrap().unwrap() == sent, "the bytes arrived whole and in order");
    }
}
