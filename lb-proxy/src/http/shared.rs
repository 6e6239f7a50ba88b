//! What an HTTP/1 client connection's byte-level reader (sniffer, deadlines) and its request
//! service tell each other.
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use crate::outlier::now_ms;

#[derive(Debug)]
pub(crate) struct ConnShared {
    /// Index of the first request whose framing is ambiguous or unparsable (`u64::MAX`: none).
    refused: AtomicU64,
    /// Requests being served (from their head to the end of their response).
    busy: AtomicU32,
    /// When the connection last became idle (ms, `now_ms` clock).
    idle_since_ms: AtomicU64,
    /// Switched protocols: the bytes are no HTTP/1 any more.
    upgraded: AtomicBool,
    /// The reader waiting while requests were busy: woken when the connection turns idle,
    /// so its idle deadline starts even if hyper does not read again by itself.
    reader: Mutex<Option<Waker>>,
}

impl ConnShared {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(ConnShared {
            refused: AtomicU64::new(u64::MAX),
            busy: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(now_ms()),
            upgraded: AtomicBool::new(false),
            reader: Mutex::new(None),
        })
    }

    pub(crate) fn refuse(&self, request_index: u64) {
        let _ = self.refused.compare_exchange(u64::MAX, request_index, Relaxed, Relaxed);
    }

    pub(crate) fn is_refused(&self, request_index: u64) -> bool {
        self.refused.load(Relaxed) == request_index
    }

    #[cfg(test)]
    pub(crate) fn first_refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Marks a request in progress until the guard drops.
    pub(crate) fn begin(self: &Arc<Self>) -> BusyGuard {
        self.busy.fetch_add(1, Relaxed);
        BusyGuard(self.clone())
    }

    /// Whether no request is being served; if so, since when (ms).
    pub(crate) fn idle_since(&self) -> Option<u64> {
        (self.busy.load(Relaxed) == 0).then(|| self.idle_since_ms.load(Relaxed))
    }

    pub(crate) fn is_busy(&self) -> bool {
        self.busy.load(Relaxed) != 0
    }

    /// Wakes `waker` when the last busy request ends.
    pub(crate) fn wake_when_idle(&self, waker: &Waker) {
        let mut r = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        if !r.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *r = Some(waker.clone());
        }
    }

    /// A head was read: the idle time starts again from here.
    pub(crate) fn head_seen(&self) {
        self.idle_since_ms.store(now_ms(), Relaxed);
    }

    pub(crate) fn set_upgraded(&self) {
        self.upgraded.store(true, Relaxed);
    }

    pub(crate) fn is_upgraded(&self) -> bool {
        self.upgraded.load(Relaxed)
    }
}

/// Held while a request is served (it lives in the response body).
#[derive(Debug)]
pub(crate) struct BusyGuard(Arc<ConnShared>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Relaxed) == 1 {
            self.0.idle_since_ms.store(now_ms(), Relaxed);
            let waker = self.0.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}
