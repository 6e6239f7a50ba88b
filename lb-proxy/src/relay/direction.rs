//! One direction of a relay as a state machine the loop steps on readiness: read from one
//! socket, write to the other, FIN at the end.
//!
//! Bytes go through a small buffer while reads are small (request/response traffic: one read
//! and one write per message, and a short read tells the socket is drained without another
//! read). A read that fills the buffer means a bulk transfer: on Linux the direction then
//! moves bytes with splice(2) through a pipe, socket to socket, without copying them into
//! user space, until the flow turns small again. Bytes a write could not take wait (in the
//! buffer or the pipe) and nothing more is read until they are gone: backpressure.
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

use super::sys;

/// The copy buffer of one direction; a read that fills it switches to splice.
pub(super) const BUF: usize = 16 * 1024;
/// Bytes moved per splice; the pipe (64 KiB by default) always holds them all.
#[cfg(target_os = "linux")]
const CHUNK: usize = 64 * 1024;

/// One socket of a relay and what its last events said about it (edge-triggered: a flag is
/// set by an event and cleared only when a call finds the socket not ready).
pub(super) struct Side {
    pub(super) stream: TcpStream,
    pub(super) readable: bool,
    pub(super) writable: bool,
    /// The peer's FIN or an error was reported: a short read no longer means drained.
    pub(super) read_closed: bool,
}

impl Side {
    pub(super) fn new(stream: TcpStream) -> Side {
        // Nothing is assumed: registering a ready socket reports it at once.
        Side { stream, readable: false, writable: false, read_closed: false }
    }

    fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
}

pub(super) struct Direction {
    /// Bytes read and not yet written are `buf[sent..]`.
    buf: Vec<u8>,
    sent: usize,
    #[cfg(target_os = "linux")]
    bulk: Bulk,
    /// The source sent its FIN (or the pipe saw its end).
    eof: bool,
    /// The FIN went on: this direction is over.
    pub(super) done: bool,
}

/// Splice state: the pipe (made at the first bulk read), whether the flow is bulk now, and
/// the bytes in the pipe still to write.
#[cfg(target_os = "linux")]
#[derive(Default)]
struct Bulk {
    pipe: Option<sys::Pipe>,
    on: bool,
    in_pipe: usize,
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl Direction {
    pub(super) fn new() -> Direction {
        Direction {
            buf: Vec::with_capacity(BUF),
            sent: 0,
            #[cfg(target_os = "linux")]
            bulk: Bulk::default(),
            eof: false,
            done: false,
        }
    }

    /// Moves what the sockets' readiness allows, one socket call per unit of `budget` at most
    /// (a budget spent means there may be more to do); returns whether any byte moved.
    pub(super) fn step(&mut self, src: &mut Side, dst: &mut Side, budget: &mut u32) -> io::Result<bool> {
        let mut moved = false;
        while !self.done && *budget > 0 {
            *budget -= 1;
            // What is waiting goes first.
            if self.sent < self.buf.len() {
                if !dst.writable {
                    break;
                }
                match sys::send(dst.fd(), &self.buf[self.sent..]) {
                    Ok(n) => {
                        self.sent += n;
                        moved = true;
                    }
                    Err(e) if would_block(&e) => dst.writable = false,
                    Err(e) => return Err(e),
                }
                continue;
            }
            #[cfg(target_os = "linux")]
            if self.bulk.in_pipe > 0 {
                if !dst.writable {
                    break;
                }
                let pipe = self.bulk.pipe.as_ref().expect("bytes in a pipe that exists");
                match sys::splice(pipe.read.as_raw_fd(), dst.fd(), self.bulk.in_pipe) {
                    Ok(n) => {
                        self.bulk.in_pipe -= n;
                        moved = true;
                    }
                    Err(e) if would_block(&e) => dst.writable = false,
                    Err(e) => return Err(e),
                }
                continue;
            }
            if self.eof {
                sys::shutdown_write(dst.fd())?;
                self.done = true;
                break;
            }
            if !src.readable {
                break;
            }
            #[cfg(target_os = "linux")]
            if self.bulk.on {
                let pipe = self.bulk.pipe.as_ref().expect("bulk mode has a pipe");
                // The pipe is empty here: a splice into it never blocks on the pipe.
                match sys::splice(src.fd(), pipe.write.as_raw_fd(), CHUNK) {
                    Ok(0) => self.eof = true,
                    Ok(n) => {
                        self.bulk.in_pipe = n;
                        // The flow turned small: back to copying.
                        self.bulk.on = n >= BUF;
                    }
                    Err(e) if would_block(&e) => src.readable = false,
                    Err(e) => return Err(e),
                }
                continue;
            }
            self.buf.clear();
            self.sent = 0;
            match sys::recv(src.fd(), &mut self.buf) {
                Ok(0) => self.eof = true,
                Ok(n) if n < BUF => {
                    // A short read drained the socket; its next data brings a new event.
                    // Not so once the peer's FIN was reported: that event came already.
                    if !src.read_closed {
                        src.readable = false;
                    }
                }
                Ok(_) => self.start_bulk(),
                Err(e) if would_block(&e) => src.readable = false,
                Err(e) => return Err(e),
            }
        }
        Ok(moved)
    }

    /// A read filled the buffer: later ones splice, where there is a pipe.
    fn start_bulk(&mut self) {
        #[cfg(target_os = "linux")]
        {
            if self.bulk.pipe.is_none() {
                // Without a pipe, bulk data is copied too.
                self.bulk.pipe = sys::Pipe::new().ok();
            }
            self.bulk.on = self.bulk.pipe.is_some();
        }
    }
}
