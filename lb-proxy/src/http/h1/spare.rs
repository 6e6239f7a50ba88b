//! The buffers of a worker's finished HTTP/1 connections, kept for its next ones. Made and
//! freed with every connection, they cost the allocator's slower paths (an 8 KiB read buffer
//! is past glibc's per-thread caches) and, on the first head split off the read buffer, one
//! more allocation for its shared header: on short connections, several hundred
//! instructions each. A worker keeps a few (32 pairs, about 300 KiB at most), each only if
//! nothing else still holds a part of it and it is no larger than usual.
use std::cell::RefCell;

use bytes::BytesMut;

/// The size a connection's read buffer is grown by (see `Reader::poll_fill`).
pub(crate) const READ_SIZE: usize = 8 * 1024;
/// Room for a usual response head: grown a few bytes at a time, the buffer it is written to
/// would be reallocated several times on every new connection.
const OUT_SIZE: usize = 1024;
/// As many as a worker has short connections in flight at once, up to this: with fewer, a
/// steady stream of them took turns freeing buffers to a full list and allocating them anew
/// from an empty one (the benchmark's 25 connections a worker: a fifth of them did).
const KEPT: usize = 32;

thread_local! {
    static SPARE: RefCell<Vec<(BytesMut, Vec<u8>)>> = const { RefCell::new(Vec::new()) };
}

/// A read buffer and a buffer for response heads, both empty: a finished connection's if
/// this worker kept one.
pub(crate) fn take() -> (BytesMut, Vec<u8>) {
    SPARE.with_borrow_mut(Vec::pop).unwrap_or_else(|| (BytesMut::new(), Vec::with_capacity(OUT_SIZE)))
}

/// Keeps a finished connection's buffers for a later connection of this worker.
pub(crate) fn give_back(mut read: BytesMut, mut out: Vec<u8>) {
    read.clear();
    out.clear();
    // Reclaimed whole only if no request head or body split off it is still held.
    let reusable = read.try_reclaim(READ_SIZE) && read.capacity() <= 2 * READ_SIZE && out.capacity() <= 4 * OUT_SIZE;
    if !reusable {
        return;
    }
    SPARE.with_borrow_mut(|spare| {
        if spare.len() < KEPT {
            spare.push((read, out));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_still_shared_is_not_kept_and_a_kept_one_comes_back_empty() {
        let (mut read, out) = take();
        read.reserve(READ_SIZE);
        read.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let head = read.split_to(8).freeze();
        give_back(read, out);
        let (again, _) = take();
        assert_eq!(again.capacity(), 0, "a head still held: the buffer was not kept");
        drop(head);
        let (mut read, mut out) = take();
        read.reserve(READ_SIZE);
        read.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        drop(read.split_to(8).freeze());
        give_back(read, out);
        let (read, out) = take();
        assert!(read.is_empty() && out.is_empty());
        assert!(read.capacity() >= READ_SIZE, "the whole buffer reclaimed: {}", read.capacity());
    }
}
