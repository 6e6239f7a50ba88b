//! Admission limits: a backend's maxconn with a bounded wait queue (HAProxy's `maxconn` +
//! queue), and the VIP's client-connection cap.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Holding one lets a request (or relay) use its backend; dropping it frees the slot.
pub(crate) type Slot = Option<OwnedSemaphorePermit>;

/// Per-backend maxconn: `None` means unlimited, and admission is free.
#[derive(Debug)]
pub(crate) struct BackendGate {
    slots: Option<Arc<Semaphore>>,
    waiting: AtomicUsize,
    queue_max: usize,
}

/// The gate refused: the queue is full or the wait timed out.
#[derive(Debug)]
pub(crate) struct GateFull;

impl BackendGate {
    pub(crate) fn new(max_connections: Option<u32>, queue_max: usize) -> Self {
        BackendGate {
            slots: max_connections.map(|n| Arc::new(Semaphore::new(n as usize))),
            waiting: AtomicUsize::new(0),
            queue_max,
        }
    }

    /// Requests waiting for a slot now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Relaxed)
    }

    /// A slot, waiting for one up to `wait` (and never past `cap`) when all are taken.
    pub(crate) async fn admit(&self, wait: Duration, cap: Option<Instant>) -> Result<Slot, GateFull> {
        let Some(slots) = &self.slots else {
            return Ok(None);
        };
        if let Ok(p) = slots.clone().try_acquire_owned() {
            return Ok(Some(p));
        }
        // Reserve a queue place first, so the queue never grows past its bound.
        if self.waiting.fetch_add(1, Relaxed) >= self.queue_max {
            self.waiting.fetch_sub(1, Relaxed);
            return Err(GateFull);
        }
        let until = Instant::now() + wait;
        let until = cap.map_or(until, |cap| cap.min(until));
        let r = tokio::time::timeout_at(until, slots.clone().acquire_owned()).await;
        self.waiting.fetch_sub(1, Relaxed);
        match r {
            Ok(Ok(p)) => Ok(Some(p)),
            _ => Err(GateFull),
        }
    }
}

/// The VIP's cap on concurrent client connections.
#[derive(Clone, Debug)]
pub(crate) struct ConnLimit(Arc<Semaphore>);

impl ConnLimit {
    pub(crate) fn new(max: usize) -> Self {
        ConnLimit(Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))))
    }

    /// A permit held for the connection's lifetime, or None when the VIP is full.
    pub(crate) fn try_admit(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queue_is_bounded_and_waiters_get_freed_slots() {
        let gate = Arc::new(BackendGate::new(Some(1), 1));
        let first = gate.admit(Duration::from_secs(5), None).await.unwrap();
        assert!(first.is_some());
        let g = gate.clone();
        let waiter = tokio::spawn(async move { g.admit(Duration::from_secs(5), None).await.is_ok() });
        // Wait (bounded) until the waiter sits in the queue.
        for _ in 0..500 {
            if gate.waiting.load(Relaxed) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(gate.waiting.load(Relaxed), 1);
        assert!(gate.admit(Duration::from_secs(5), None).await.is_err(), "queue of 1 is full");
        drop(first);
        assert!(waiter.await.unwrap(), "the queued request gets the freed slot");
    }

    #[tokio::test]
    async fn wait_times_out() {
        let gate = BackendGate::new(Some(1), 10);
        let _held = gate.admit(Duration::from_secs(1), None).await.unwrap();
        assert!(gate.admit(Duration::from_millis(20), None).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_at_the_cap_if_that_comes_first() {
        let gate = BackendGate::new(Some(1), 10);
        let _held = gate.admit(Duration::from_secs(1), None).await.unwrap();
        let start = Instant::now();
        let cap = Some(start + Duration::from_millis(30));
        assert!(gate.admit(Duration::from_secs(5), cap).await.is_err());
        assert_eq!(start.elapsed(), Duration::from_millis(30));
        assert_eq!(gate.waiting.load(Relaxed), 0, "left the queue");
    }

    #[tokio::test]
    async fn unlimited_admits_everything() {
        let gate = BackendGate::new(None, 0);
        for _ in 0..1000 {
            assert!(gate.admit(Duration::ZERO, None).await.unwrap().is_none());
        }
    }
}
