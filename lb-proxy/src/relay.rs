//! Byte relay between two TCP connections with correct half-close: when one side finishes
//! sending, the other side's write half is shut down and the reverse direction keeps going
//! until it finishes too. Ends early when no byte moved either way for `idle`.
//!
//! Each direction moves bytes through a small buffer while reads are small (request/response
//! traffic: one read and one write per message, and a short read tells the socket is drained
//! without another read). A read that fills the buffer means a bulk transfer: on Linux the
//! direction then moves bytes with splice(2) through a pipe, socket to socket, without copying
//! them into userspace, until the flow turns small again.
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::time::Instant;

use crate::join_woken::try_join_woken;
use crate::outlier::now_ms;
use crate::quiet_sleep::QuietSleep;

/// The copy buffer of one direction; a read that fills it switches to splice.
const BUF: usize = 16 * 1024;

pub(crate) async fn relay(mut a: TcpStream, mut b: TcpStream, idle: Duration) -> io::Result<()> {
    let last = AtomicU64::new(now_ms());
    let (ar, aw) = a.split();
    let (br, bw) = b.split();
    // Each direction is polled only when its own socket woke the task.
    let both = try_join_woken(pump(ar, bw, &last), pump(br, aw, &last));
    // Biased: the branches are polled in order, without a random draw for every wake-up.
    tokio::select! {
        biased;
        r = both => r,
        _ = idle_watch(&last, idle) => Ok(()),
    }
}

/// Copies one direction until EOF, then shuts down the writer (sends FIN).
async fn pump(mut from: ReadHalf<'_>, mut to: WriteHalf<'_>, last: &AtomicU64) -> io::Result<()> {
    // Read into its spare room, never zeroed: a zeroed buffer (calloc) cost a 16 KiB memset
    // per direction on every connection, whose bytes each read overwrites anyway.
    let mut buf = Vec::with_capacity(BUF);
    #[cfg(target_os = "linux")]
    let mut pipe: Option<splice::Pipe> = None;
    loop {
        buf.clear();
        // tokio's read clears the socket's readiness after a short read: no EAGAIN round.
        let n = from.read_buf(&mut buf).await?;
        if n == 0 {
            break;
        }
        to.write_all(&buf).await?;
        last.store(now_ms(), Relaxed);
        #[cfg(target_os = "linux")]
        if n == BUF {
            if pipe.is_none() {
                // Without a pipe, bulk data is copied too.
                pipe = splice::Pipe::new().ok();
            }
            if let Some(p) = &pipe
                && splice::pump_bulk(from.as_ref(), to.as_ref(), p, last).await?
            {
                break;
            }
        }
    }
    match to.shutdown().await {
        Err(e) if e.kind() != io::ErrorKind::NotConnected => Err(e),
        _ => Ok(()),
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

#[cfg(target_os = "linux")]
mod splice {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    use tokio::io::Interest;
    use tokio::net::TcpStream;

    use crate::outlier::now_ms;

    /// Bytes moved per splice; the pipe (64 KiB by default) always holds them all.
    const CHUNK: usize = 64 * 1024;

    pub(super) struct Pipe {
        read: OwnedFd,
        write: OwnedFd,
    }

    impl Pipe {
        pub(super) fn new() -> io::Result<Pipe> {
            let mut fds = [0i32; 2];
            // SAFETY: pipe2 writes two descriptors into `fds` on success, which we then own.
            let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: both descriptors are fresh and owned by nobody else.
            Ok(unsafe { Pipe { read: OwnedFd::from_raw_fd(fds[0]), write: OwnedFd::from_raw_fd(fds[1]) } })
        }
    }

    fn splice(from: i32, to: i32, len: usize) -> io::Result<usize> {
        let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
        // SAFETY: plain descriptors, null offsets (both ends are streams).
        let n = unsafe { libc::splice(from, std::ptr::null_mut(), to, std::ptr::null_mut(), len, flags) };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
    }

    /// Moves one direction socket -> pipe -> socket while the data comes in big chunks.
    /// Returns true at EOF (the caller sends the FIN), false once a splice moved less than
    /// the copy buffer holds (the flow turned small: back to copying). The pipe is drained before the
    /// next read, so it never blocks; the sockets' readiness comes from tokio (`try_io`
    /// clears it on EAGAIN).
    pub(super) async fn pump_bulk(from: &TcpStream, to: &TcpStream, pipe: &Pipe, last: &AtomicU64) -> io::Result<bool> {
        let (src, dst) = (from.as_raw_fd(), to.as_raw_fd());
        let (pr, pw) = (pipe.read.as_raw_fd(), pipe.write.as_raw_fd());
        loop {
            let n = loop {
                from.readable().await?;
                match from.try_io(Interest::READABLE, || splice(src, pw, CHUNK)) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            };
            if n == 0 {
                return Ok(true);
            }
            let mut left = n;
            while left > 0 {
                to.writable().await?;
                match to.try_io(Interest::WRITABLE, || splice(pr, dst, left)) {
                    Ok(m) => left -= m,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
            last.store(now_ms(), Relaxed);
            if n < super::BUF {
                return Ok(false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// A connected pair of loopback sockets.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (c, l.accept().await.unwrap().0)
    }

    #[tokio::test]
    async fn small_and_bulk_messages_cross_byte_exact_in_both_directions() {
        let (mut client, proxy_client) = pair().await;
        let (proxy_backend, mut backend) = pair().await;
        let relayed = tokio::spawn(relay(proxy_client, proxy_backend, Duration::from_secs(30)));
        // Small, then bulk (switches to splice where there is one), then small again.
        let sizes = [10, 1024, 3 * BUF + 7, 5 * 1024 * 1024, 100, 1];
        let work = async {
            for (i, &n) in sizes.iter().enumerate() {
                let msg: Vec<u8> = (0..n).map(|k| (k * 31 + i) as u8).collect();
                let mut got = vec![0u8; n];
                let (w, r) = tokio::join!(client.write_all(&msg), backend.read_exact(&mut got));
                w.unwrap();
                r.unwrap();
                assert!(got == msg, "client -> backend message {i} differs");
                let (w, r) = tokio::join!(backend.write_all(&msg), client.read_exact(&mut got));
                w.unwrap();
                r.unwrap();
                assert!(got == msg, "backend -> client message {i} differs");
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
        tokio::time::timeout(Duration::from_secs(30), work).await.expect("relay stalled");
        relayed.await.unwrap().unwrap();
    }
}
