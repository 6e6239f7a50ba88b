//! The socket calls of the relay loop, one system call each: no readiness layer in between
//! (the loop keeps its own, from its epoll's edge-triggered events).
//!
//! recv and send go through syscall(2) rather than glibc's wrappers of the same name: those
//! are thread cancellation points, which switch asynchronous cancellation on and off around
//! every call (callgrind: about 30 instructions a call, a tenth of a relayed request's).
//! Nothing in this process cancels threads.
use std::io;
use std::os::fd::RawFd;

/// Runs `call` again while a signal interrupts it.
fn retry(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads into `buf`'s spare room (never zeroed: each read overwrites what it reports).
pub(super) fn recv(fd: RawFd, buf: &mut Vec<u8>) -> io::Result<usize> {
    let room = buf.spare_capacity_mut();
    let (ptr, len) = (room.as_mut_ptr(), room.len());
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: recvfrom(2) without an address: the kernel writes at most `len` bytes into
    // memory `buf` owns.
    let n = retry(|| unsafe { libc::syscall(libc::SYS_recvfrom, fd, ptr, len, 0, null, null) as isize })?;
    // SAFETY: the kernel initialised the first `n` bytes of the spare room.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Writes from `buf`; MSG_NOSIGNAL: a peer gone makes this an EPIPE error, not a signal.
pub(super) fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    let null = std::ptr::null::<libc::c_void>();
    // SAFETY: sendto(2) without an address: the kernel reads at most `buf.len()` bytes from
    // `buf`.
    retry(|| unsafe {
        libc::syscall(libc::SYS_sendto, fd, buf.as_ptr(), buf.len(), libc::MSG_NOSIGNAL, null, 0) as isize
    })
}

/// Sends the FIN; a peer that is already gone (ENOTCONN) is not an error.
pub(super) fn shutdown_write(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain descriptor.
    match retry(|| unsafe { libc::shutdown(fd, libc::SHUT_WR) } as isize) {
        Err(e) if e.kind() != io::ErrorKind::NotConnected => Err(e),
        _ => Ok(()),
    }
}

#[cfg(target_os = "linux")]
pub(super) use splice::{Pipe, splice};

#[cfg(target_os = "linux")]
mod splice {
    use std::io;
    use std::os::fd::{FromRawFd, OwnedFd, RawFd};

    /// A pipe between two sockets: splice(2) moves bulk data through it without copying it
    /// into user space.
    pub(in crate::relay) struct Pipe {
        pub(in crate::relay) read: OwnedFd,
        pub(in crate::relay) write: OwnedFd,
    }

    impl Pipe {
        pub(in crate::relay) fn new() -> io::Result<Pipe> {
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

    pub(in crate::relay) fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
        let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
        // SAFETY: plain descriptors, null offsets (both ends are streams).
        super::retry(|| unsafe { libc::splice(from, std::ptr::null_mut(), to, std::ptr::null_mut(), len, flags) })
    }
}
