//! Byte relay between two TCP connections with correct half-close: when one side finishes
//! sending, the other side's write half is shut down and the reverse direction keeps going
//! until it finishes too. Ends early when no byte moved either way for `idle`.
//!
//! On Linux the bytes move with splice(2) through a pipe, socket to socket, without being
//! copied into userspace; elsewhere (or if a pipe cannot be made) with a buffer.
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};

use crate::outlier::now_ms;

const BUF: usize = 64 * 1024;

pub(crate) async fn relay(a: TcpStream, b: TcpStream, idle: Duration) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    if let (Ok(p1), Ok(p2)) = (splice::Pipe::new(), splice::Pipe::new()) {
        let last = AtomicU64::new(now_ms());
        let both = async {
            tokio::try_join!(
                splice::pump(&a, &b, &p1, &last),
                splice::pump(&b, &a, &p2, &last)
            )
        };
        return tokio::select! {
            r = both => r.map(|_| ()),
            _ = idle_watch(&last, idle) => Ok(()),
        };
    }
    copy_relay(a, b, idle).await
}

async fn copy_relay(mut a: TcpStream, mut b: TcpStream, idle: Duration) -> io::Result<()> {
    let last = AtomicU64::new(now_ms());
    let (ar, aw) = a.split();
    let (br, bw) = b.split();
    let both = async { tokio::try_join!(pump(ar, bw, &last), pump(br, aw, &last)) };
    tokio::select! {
        r = both => r.map(|_| ()),
        _ = idle_watch(&last, idle) => Ok(()),
    }
}

/// Copies one direction until EOF, then shuts down the writer (sends FIN).
async fn pump(mut from: ReadHalf<'_>, mut to: WriteHalf<'_>, last: &AtomicU64) -> io::Result<()> {
    let mut buf = vec![0u8; BUF];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n]).await?;
        last.store(now_ms(), Relaxed);
    }
    to.shutdown().await
}

/// Resolves once `last` is older than `idle`.
async fn idle_watch(last: &AtomicU64, idle: Duration) {
    let idle_ms = idle.as_millis() as u64;
    loop {
        let quiet = now_ms().saturating_sub(last.load(Relaxed));
        if quiet >= idle_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis(idle_ms - quiet)).await;
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
            Ok(unsafe {
                Pipe {
                    read: OwnedFd::from_raw_fd(fds[0]),
                    write: OwnedFd::from_raw_fd(fds[1]),
                }
            })
        }
    }

    fn splice(from: i32, to: i32, len: usize) -> io::Result<usize> {
        let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
        // SAFETY: plain descriptors, null offsets (both ends are streams).
        let n = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                len,
                flags,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// One direction: socket -> pipe -> socket until EOF, then FIN to the receiver. The pipe is
    /// drained before the next read, so it never blocks; the sockets' readiness comes from
    /// tokio (`try_io` clears it on EAGAIN).
    pub(super) async fn pump(
        from: &TcpStream,
        to: &TcpStream,
        pipe: &Pipe,
        last: &AtomicU64,
    ) -> io::Result<()> {
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
                break;
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
        }
        // SAFETY: shutting down the write side of a socket we hold.
        if unsafe { libc::shutdown(dst, libc::SHUT_WR) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOTCONN) {
                return Err(e);
            }
        }
        Ok(())
    }
}
