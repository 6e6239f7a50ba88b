//! The client's request body on its way to a backend. It tells the request's timers when the
//! upload is over (backend timeouts start only then, so a slow but steady upload is not cut),
//! cuts a client that goes silent mid-body, and records whether the body failed on the
//! client's side, so a client's fault is answered 400/408 and never counted against the
//! backend.
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::Notify;

use super::conn::IncomingBody;
use super::idle::IdleTimer;
use crate::error::{BoxError, ClientFault};
use crate::outlier::now_ms;

/// How the upload went, shared with the request's timers.
#[derive(Debug, Default)]
pub(crate) struct Upload {
    state: AtomicU8,
    done: Notify,
    /// When the body last moved or was asked for (ms, `now_ms` clock).
    last_ms: AtomicU64,
    /// The body is waiting for the client (so a silence is the client's).
    client_turn: AtomicBool,
}

const STREAMING: u8 = 0;
const COMPLETE: u8 = 1;
/// The client sent a malformed body or went away mid-body.
const BROKEN: u8 = 2;
/// The client stopped sending mid-body.
const STALLED: u8 = 3;
/// The body grew past `limits.max_body_bytes`.
const TOO_LARGE: u8 = 4;

impl Upload {
    /// The upload of a body that ended before it was sent.
    pub(crate) fn already_ended() -> Self {
        Upload { state: AtomicU8::new(COMPLETE), ..Upload::default() }
    }

    /// The body has been sent whole, or failed: nothing more will come of it.
    pub(crate) fn has_ended(&self) -> bool {
        self.state.load(Relaxed) != STREAMING
    }

    pub(crate) fn fault(&self) -> Option<ClientFault> {
        match self.state.load(Relaxed) {
            BROKEN => Some(ClientFault::Broken),
            STALLED => Some(ClientFault::Stalled),
            TOO_LARGE => Some(ClientFault::TooLarge),
            _ => None,
        }
    }

    fn finish(&self, state: u8) {
        if self.state.compare_exchange(STREAMING, state, Relaxed, Relaxed).is_ok() {
            self.done.notify_waiters();
        }
    }

    /// Resolves once the body has been sent whole (or failed); never for a body that is
    /// still streaming.
    pub(crate) async fn ended(&self) {
        // Most requests have no body: their upload ended before anyone waits for it, and
        // then no waiter need be registered.
        if self.has_ended() {
            return;
        }
        loop {
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.has_ended() {
                return;
            }
            notified.await;
        }
    }

    /// Resolves when, mid-upload, the backend side has not asked for more of the body for
    /// `idle` (a backend that stopped reading); never once the upload ended. A silent client
    /// is the body's own idle timer's business.
    pub(crate) async fn backend_stopped_reading(&self, idle: Duration) {
        let idle_ms = idle.as_millis() as u64;
        loop {
            if self.has_ended() {
                return std::future::pending().await;
            }
            let quiet = now_ms().saturating_sub(self.last_ms.load(Relaxed));
            if quiet >= idle_ms && !self.client_turn.load(Relaxed) {
                return;
            }
            let wait = if quiet >= idle_ms { idle_ms } else { idle_ms - quiet };
            tokio::select! {
                biased;
                _ = self.ended() => {}
                _ = tokio::time::sleep(Duration::from_millis(wait.max(1))) => {}
            }
        }
    }
}

pub(crate) struct RequestBody<B> {
    inner: B,
    upload: Arc<Upload>,
    idle: IdleTimer,
    /// Bytes the body may still bring (`limits.max_body_bytes`), if limited.
    room: Option<u64>,
}

impl<B: IncomingBody> RequestBody<B> {
    pub(crate) fn new(inner: B, idle: Duration, max: Option<u64>) -> (Self, Arc<Upload>) {
        let upload = Arc::new(Upload { last_ms: AtomicU64::new(now_ms()), ..Upload::default() });
        if inner.is_end_stream() {
            upload.finish(COMPLETE);
        }
        let body = RequestBody { inner, upload: upload.clone(), idle: IdleTimer::new(idle), room: max };
        (body, upload)
    }
}

impl<B: IncomingBody> Body for RequestBody<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        this.upload.last_ms.store(now_ms(), Relaxed);
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        this.upload.client_turn.store(r.is_pending(), Relaxed);
        match r {
            Poll::Ready(Some(Ok(frame))) => {
                // A declared length past the limit never gets here (refused with 413 first):
                // this is a chunked or h2 body that keeps growing.
                if let (Some(room), Some(data)) = (&mut this.room, frame.data_ref()) {
                    match room.checked_sub(data.len() as u64) {
                        Some(left) => *room = left,
                        None => {
                            this.upload.finish(TOO_LARGE);
                            return Poll::Ready(Some(Err("the request body is larger than max_body_bytes".into())));
                        }
                    }
                }
                if this.inner.is_end_stream() {
                    this.upload.finish(COMPLETE);
                }
                this.idle.activity();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.upload.finish(COMPLETE);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.upload.finish(BROKEN);
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Pending => {
                if !this.idle.expired(cx) {
                    return Poll::Pending;
                }
                this.upload.finish(STALLED);
                Poll::Ready(Some(Err("the client stopped sending its request body".into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for RequestBody<B> {
    fn drop(&mut self) {
        // Dropped unfinished: the backend no longer wants it (answered early, or failed).
        // Timers waiting for the upload's end must not wait for ever.
        self.upload.finish(COMPLETE);
    }
}
