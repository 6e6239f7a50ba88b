//! The read side of an HTTP/1 client connection, and a request's body read from it as the
//! backend side takes it (no copy into a channel between the two). The write side reaches the
//! same stream through the same shared state: one allocation for the connection's stream, its
//! halves and its read buffer, where splitting the stream first would take one more (and a
//! second lock on every read and write).
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::BoxError;
use crate::http::decode::{Decoder, Step};

use super::spare::READ_SIZE;

pub(crate) struct Reader<R> {
    /// The whole client stream: read here, written through a `Writer`.
    rd: R,
    /// Read from the client and not yet taken: the rest of a head, a body, pipelined requests.
    pub(crate) buf: BytesMut,
    /// The current request's body has been read whole (or it had none): what follows in
    /// `buf` is the next request.
    pub(crate) body_done: bool,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    /// Reading into `buf` (empty).
    pub(crate) fn new(rd: R, buf: BytesMut) -> Self {
        Reader { rd, buf, body_done: true }
    }

    /// Reads into `buf`: the number of bytes, 0 at the client's end.
    pub(crate) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_SIZE / 2 {
            self.buf.reserve(READ_SIZE);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.rd), cx, &mut self.buf)
    }

    pub(crate) fn into_inner(self) -> (R, BytesMut) {
        (self.rd, self.buf)
    }
}

/// Shared by the connection's loop (heads) and the current request's body.
pub(crate) type SharedReader<R> = Arc<Mutex<Reader<R>>>;

pub(crate) fn lock<R>(r: &SharedReader<R>) -> std::sync::MutexGuard<'_, Reader<R>> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}

/// The write side of the client stream held by a `SharedReader`. The lock is held only for
/// each call, as `tokio::io::split`'s would be.
pub(crate) struct Writer<S>(pub(crate) SharedReader<S>);

impl<S: AsyncWrite + Unpin> AsyncWrite for Writer<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut lock(&self.0).rd).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut lock(&self.0).rd).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        lock(&self.0).rd.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut lock(&self.0).rd).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut lock(&self.0).rd).poll_shutdown(cx)
    }
}

pub(crate) struct ClientBody<R> {
    reader: SharedReader<R>,
    decoder: Decoder,
}

impl<R> ClientBody<R> {
    pub(crate) fn new(reader: SharedReader<R>, decoder: Decoder) -> Self {
        ClientBody { reader, decoder }
    }
}

impl<R: AsyncRead + Unpin> Body for ClientBody<R> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let mut reader = lock(&this.reader);
        loop {
            match this.decoder.step(&mut reader.buf) {
                Step::Frame(f) => {
                    reader.body_done = this.decoder.is_done();
                    return Poll::Ready(Some(Ok(f)));
                }
                Step::End => {
                    reader.body_done = true;
                    return Poll::Ready(None);
                }
                Step::Malformed(e) => {
                    this.decoder = Decoder::Done;
                    return Poll::Ready(Some(Err(format!("malformed request body: {e}").into())));
                }
                Step::More => {}
            }
            match reader.poll_fill(cx) {
                Poll::Ready(Ok(0)) => {
                    this.decoder = Decoder::Done;
                    return Poll::Ready(Some(Err("the client closed the connection mid-body".into())));
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => {
                    this.decoder = Decoder::Done;
                    return Poll::Ready(Some(Err(e.into())));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        self.decoder.size_hint()
    }
}
