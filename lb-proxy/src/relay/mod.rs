//! Byte relay between two TCP connections with correct half-close: when one side finishes
//! sending, the other side's write half is shut down and the reverse direction keeps going
//! until it finishes too. Ends early when no byte moved either way for `idle`.
//!
//! TCP VIPs' relays run in their thread's relay loop (`event_loop`), one direction as a
//! `direction::Direction` each; relays of other streams (upgraded HTTP, TLS) through
//! [`copy_with_idle`].
mod direction;
mod event_loop;
mod sys;

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::outlier::now_ms;
use crate::quiet_sleep::QuietSleep;
use event_loop::{Key, Shared};

/// Relays between `a` (the client) and `b` until both sides finished, an error ends it, or
/// nothing moved either way for `idle`. Dropping the future closes both connections.
pub(crate) async fn relay(a: TcpStream, b: TcpStream, idle: Duration) -> io::Result<()> {
    let (a, b) = (a.into_std()?, b.into_std()?);
    let shared = Shared::local()?;
    let (key, ended) = shared.add(a, b, idle)?;
    let mut registered = Registered { shared, key: Some(key) };
    let end = ended.await;
    // It ended in the loop: nothing to cancel.
    registered.key = None;
    end.unwrap_or_else(|_| Err(io::Error::other("the relay loop ended")))
}

/// Takes the relay out of the loop (closing it) if its task goes away before it ended.
struct Registered {
    shared: Arc<Shared>,
    key: Option<Key>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.shared.cancel(key);
        }
    }
}

/// Relays between two streams of any kind (upgraded HTTP connections, TLS) until both sides
/// finished, or until nothing moved either way for `idle`.
pub(crate) async fn copy_with_idle<A, B>(a: A, b: B, idle: Duration) -> io::Result<()>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let last = AtomicU64::new(now_ms());
    let mut a = Stamped { inner: a, last: &last };
    let mut b = Stamped { inner: b, last: &last };
    tokio::select! {
        biased;
        r = tokio::io::copy_bidirectional(&mut a, &mut b) => r.map(|_| ()),
        _ = idle_watch(&last, idle) => Ok(()),
    }
}

/// A stream that stamps `last` whenever bytes are read from it.
struct Stamped<'a, T> {
    inner: T,
    last: &'a AtomicU64,
}

impl<T: AsyncRead + Unpin> AsyncRead for Stamped<'_, T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.last.store(now_ms(), Relaxed);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Stamped<'_, T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Resolves once `last` is older than `idle`.
async fn idle_watch(last: &AtomicU64, idle: Duration) {
    let idle_ms = idle.as_millis() as u64;
    loop {
        let quiet = now_ms().saturating_sub(last.load(Relaxed));
        if quiet >= idle_ms {
            return;
        }
        QuietSleep::until(Instant::now() + Duration::from_millis(idle_ms - quiet)).await;
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::direction::BUF;
    use super::*;

    /// A connected pair of loopback sockets.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (c, l.accept().await.unwrap().0)
    }

    fn message(n: usize, seed: usize) -> Vec<u8> {
        (0..n).map(|k| (k * 31 + seed) as u8).collect()
    }

    /// Writes `msg` into `from` while reading as many bytes from `to`; they must be the same.
    async fn cross(from: &mut TcpStream, to: &mut TcpStream, msg: &[u8]) {
        let mut got = vec![0u8; msg.len()];
        let (w, r) = tokio::join!(from.write_all(msg), to.read_exact(&mut got));
        w.unwrap();
        r.unwrap();
        assert!(got == msg, "a message of {} bytes differs", msg.len());
    }

    /// A relay between a client and a backend: (client, backend, the relay's task).
    async fn relayed(idle: Duration) -> (TcpStream, TcpStream, tokio::task::JoinHandle<io::Result<()>>) {
        let (client, proxy_client) = pair().await;
        let (proxy_backend, backend) = pair().await;
        (client, backend, tokio::spawn(relay(proxy_client, proxy_backend, idle)))
    }

    const LONG: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn small_and_bulk_messages_cross_byte_exact_in_both_directions() {
        let (mut client, mut backend, relayed) = relayed(LONG).await;
        // Small, then bulk (switches to splice where there is one), then small again.
        let sizes = [10, 1024, 3 * BUF + 7, 5 * 1024 * 1024, 100, 1];
        let work = async {
            for (i, &n) in sizes.iter().enumerate() {
                cross(&mut client, &mut backend, &message(n, i)).await;
                cross(&mut backend, &mut client, &message(n, i)).await;
            }
            // Half-close travels on: the backend sees EOF, and can still answer.
            client.shutdown().await.unwrap();
            let mut rest = Vec::new();
            backend.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty());
            backend.write_all(b"bye").await.unwrap();
            backend.shutdown().await.unwrap();
            let mut tail = Vec::new();
            client.read_to_end(&mut tail).await.unwrap();
            assert_eq!(tail, b"bye");
        };
        tokio::time::timeout(LONG, work).await.expect("relay stalled");
        relayed.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn the_backend_finishing_first_leaves_the_client_sending() {
        let (mut client, mut backend, relayed) = relayed(LONG).await;
        let work = async {
            backend.write_all(b"early answer").await.unwrap();
            backend.shutdown().await.unwrap();
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"early answer");
            // The other way still carries small and bulk data, then its own FIN.
            cross(&mut client, &mut backend, b"small").await;
            cross(&mut client, &mut backend, &message(3 * 1024 * 1024, 7)).await;
            client.shutdown().await.unwrap();
            let mut rest = Vec::new();
            backend.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty());
        };
        tokio::time::timeout(LONG, work).await.expect("relay stalled");
        relayed.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_reader_that_lags_holds_the_writer_back_and_loses_nothing() {
        let (mut client, mut backend, relayed) = relayed(LONG).await;
        let big = message(16 * 1024 * 1024, 3);
        let work = async {
            // More than the sockets' buffers hold: the relay's writes to the client find it
            // full until the client reads.
            let writer = async {
                backend.write_all(&big).await.unwrap();
                backend.shutdown().await.unwrap();
            };
            let reader = async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.unwrap();
                got
            };
            let ((), got) = tokio::join!(writer, reader);
            assert!(got == big, "{} bytes came of {}", got.len(), big.len());
            client.shutdown().await.unwrap();
        };
        tokio::time::timeout(LONG, work).await.expect("relay stalled");
        relayed.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_reset_ends_the_relay_and_closes_the_other_side() {
        let (client, mut backend, relayed) = relayed(LONG).await;
        // Linger 0: closing sends an RST instead of a FIN.
        socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO)).unwrap();
        drop(client);
        let r = tokio::time::timeout(LONG, relayed).await.expect("relay stalled").unwrap();
        assert!(r.is_err(), "a reset is an error: {r:?}");
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(LONG, backend.read_to_end(&mut rest)).await.expect("backend left open");
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn a_quiet_relay_ends_and_closes_both_sides() {
        let (mut client, mut backend, relayed) = relayed(Duration::from_millis(200)).await;
        cross(&mut client, &mut backend, b"then silence").await;
        tokio::time::timeout(LONG, relayed).await.expect("idle relay left open").unwrap().unwrap();
        for side in [&mut client, &mut backend] {
            let mut rest = Vec::new();
            tokio::time::timeout(LONG, side.read_to_end(&mut rest)).await.expect("side left open").unwrap();
            assert!(rest.is_empty());
        }
    }

    #[tokio::test]
    async fn dropping_the_relay_closes_both_sides() {
        let (mut client, mut backend, relayed) = relayed(LONG).await;
        cross(&mut client, &mut backend, b"hello").await;
        relayed.abort();
        let _ = relayed.await;
        for side in [&mut client, &mut backend] {
            let mut rest = Vec::new();
            tokio::time::timeout(LONG, side.read_to_end(&mut rest)).await.expect("side left open").unwrap();
            assert!(rest.is_empty());
        }
    }

    /// A thread's relays outlive no runtime: the next runtime on the thread gets a loop of
    /// its own (the first one's driver went with its runtime).
    #[test]
    fn a_later_runtime_on_the_same_thread_relays_too() {
        for round in 0..2 {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let (mut client, mut backend, relayed) = relayed(LONG).await;
                let work = async {
                    cross(&mut client, &mut backend, &message(100, round)).await;
                    cross(&mut backend, &mut client, &message(100, round)).await;
                    client.shutdown().await.unwrap();
                    backend.shutdown().await.unwrap();
                };
                tokio::time::timeout(LONG, work).await.expect("relay stalled");
                relayed.await.unwrap().unwrap();
            });
        }
    }
}
