//! Admission limits: a backend's maxconn with a bounded wait queue (HAProxy's `maxconn` +
//! queue), the VIP's client-connection cap, and its caps per client address (connections
//! held, requests a second).
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::outlier::now_ms;

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

/// The VIP's cap on concurrent client connections. A count, not a semaphore: nothing waits
/// for a place (a connection over the cap is refused at once), and a semaphore's release
/// takes its waiters' lock every time (callgrind: about 0.1k instructions a connection).
#[derive(Clone, Debug)]
pub(crate) struct ConnLimit(Arc<OpenCount>);

#[derive(Debug)]
struct OpenCount {
    count: AtomicUsize,
    max: usize,
}

/// A connection's place under its VIP's cap, given back when dropped.
#[derive(Debug)]
pub(crate) struct ConnPlace(Arc<OpenCount>);

impl ConnLimit {
    pub(crate) fn new(max: usize) -> Self {
        ConnLimit(Arc::new(OpenCount { count: AtomicUsize::new(0), max }))
    }

    /// A place held for the connection's lifetime, or None when the VIP is full.
    pub(crate) fn try_admit(&self) -> Option<ConnPlace> {
        let open = &self.0;
        open.count.fetch_update(Relaxed, Relaxed, |n| (n < open.max).then_some(n + 1)).ok()?;
        Some(ConnPlace(open.clone()))
    }
}

impl Drop for ConnPlace {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Relaxed);
    }
}

/// The VIP's cap on concurrent connections from one client (nginx's `limit_conn`, HAProxy's
/// `sc_conn_cur`): one address cannot take the whole VIP cap. IPv6 clients count by their /64,
/// the block a single subscriber or host is given, which it can spread connections over.
/// The table holds only clients with open connections, so it never outgrows the VIP cap.
#[derive(Debug)]
pub(crate) struct PerClientLimit {
    max: u32,
    open: Mutex<HashMap<ClientKey, u32>>,
}

/// A client as the per-client cap counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ClientKey {
    V4([u8; 4]),
    /// The address's first 64 bits.
    V6Prefix([u8; 8]),
}

impl ClientKey {
    pub(crate) fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => ClientKey::V4(v4.octets()),
            // A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d.
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey::V4(v4.octets()),
                None => ClientKey::V6Prefix(v6.octets()[..8].try_into().expect("8 of 16 bytes")),
            },
        }
    }
}

/// Held for a connection's lifetime; dropping it gives the client's place back.
#[derive(Debug)]
pub(crate) struct ClientPlace {
    limit: Arc<PerClientLimit>,
    key: ClientKey,
}

impl PerClientLimit {
    pub(crate) fn new(max: u32) -> Arc<Self> {
        Arc::new(PerClientLimit { max, open: Mutex::new(HashMap::new()) })
    }

    /// A place for one more connection of `client`, or None when it holds `max` already.
    pub(crate) fn try_admit(self: &Arc<Self>, client: IpAddr) -> Option<ClientPlace> {
        let key = ClientKey::of(client);
        let mut open = self.lock();
        let n = open.entry(key).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(ClientPlace { limit: self.clone(), key })
    }

    /// Clients with open connections now.
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ClientKey, u32>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for ClientPlace {
    fn drop(&mut self) {
        let mut open = self.limit.lock();
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// The VIP's rate of requests (HTTP) or new connections (TCP) per client (nginx's `limit_req`
/// with `nodelay`, HAProxy's `sc_http_req_rate`): GCRA from governor, one state per client as
/// `ClientKey` counts them. A client past its burst is refused until its rate lets it in again.
#[derive(Debug)]
pub(crate) struct PerClientRate {
    limiter: governor::DefaultKeyedRateLimiter<ClientKey>,
    /// When clients back at a full burst were last dropped from the table (ms, `now_ms`).
    swept_ms: AtomicU64,
}

/// The table is swept of clients back at a full burst once it holds this many, at most once a
/// second: a flood of one-off clients cannot grow it for long, nor make every request sweep.
const SWEEP_ABOVE: usize = 10_000;

impl PerClientRate {
    pub(crate) fn new(per_second: NonZeroU32, burst: NonZeroU32) -> Self {
        let quota = governor::Quota::per_second(per_second).allow_burst(burst);
        PerClientRate { limiter: governor::RateLimiter::keyed(quota), swept_ms: AtomicU64::new(now_ms()) }
    }

    /// Ok if `client` may go on now, else how long until it may.
    pub(crate) fn check(&self, client: IpAddr) -> Result<(), Duration> {
        use governor::clock::Clock as _;
        if self.limiter.len() > SWEEP_ABOVE {
            let (now, swept) = (now_ms(), self.swept_ms.load(Relaxed));
            if now.saturating_sub(swept) >= 1000 && self.swept_ms.compare_exchange(swept, now, Relaxed, Relaxed).is_ok()
            {
                self.limiter.retain_recent();
            }
        }
        self.limiter
            .check_key(&ClientKey::of(client))
            .map_err(|not_until| not_until.wait_time_from(self.limiter.clock().now()))
    }

    #[cfg(test)]
    fn clients(&self) -> usize {
        self.limiter.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_admits_up_to_its_max_and_a_place_given_back_is_free_again() {
        let limit = ConnLimit::new(2);
        let (a, b) = (limit.try_admit().unwrap(), limit.try_admit().unwrap());
        assert!(limit.try_admit().is_none(), "full");
        drop(a);
        let c = limit.try_admit().expect("a place given back");
        assert!(limit.try_admit().is_none());
        drop((b, c));
        assert_eq!(limit.0.count.load(Relaxed), 0);
        assert!(ConnLimit::new(0).try_admit().is_none());
    }

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

    #[test]
    fn per_client_cap_counts_addresses_and_ipv6_blocks_and_forgets_closed_ones() {
        let limit = PerClientLimit::new(2);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let a1 = limit.try_admit(ip("192.0.2.1")).unwrap();
        let a2 = limit.try_admit(ip("::ffff:192.0.2.1")).expect("the same client, mapped");
        assert!(limit.try_admit(ip("192.0.2.1")).is_none(), "a third is refused");
        assert!(limit.try_admit(ip("192.0.2.2")).is_some(), "another client is not");
        let b1 = limit.try_admit(ip("2001:db8:0:1::1")).unwrap();
        let _b2 = limit.try_admit(ip("2001:db8:0:1:ffff::2")).unwrap();
        assert!(limit.try_admit(ip("2001:db8:0:1::3")).is_none(), "the same /64");
        assert!(limit.try_admit(ip("2001:db8:0:2::1")).is_some(), "another /64");
        drop(a1);
        let _a3 = limit.try_admit(ip("192.0.2.1")).expect("a closed connection's place is free again");
        drop((a2, b1));
        assert_eq!(limit.clients(), 2, "192.0.2.1 (one open) and the first /64 (one open)");
    }

    #[test]
    fn request_rate_allows_the_burst_then_refuses_with_a_wait_per_client() {
        let rate = PerClientRate::new(NonZeroU32::new(2).unwrap(), NonZeroU32::new(3).unwrap());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..3 {
            assert!(rate.check(a).is_ok(), "the burst");
        }
        let wait = rate.check(a).expect_err("past the burst");
        assert!(wait > Duration::ZERO && wait <= Duration::from_millis(500), "one request every 500 ms: {wait:?}");
        assert!(rate.check("192.0.2.2".parse().unwrap()).is_ok(), "another client has its own");
        assert_eq!(rate.clients(), 2);
    }
}
