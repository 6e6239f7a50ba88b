//! The sender (FLOW_EVENTS → peers) and the receiver (peers → the writer) of flow sharing.
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use aya::maps::{MapData, RingBuf};
use lb_common::flow::SharedFlow;
use tokio::io::unix::AsyncFd;
use tokio::net::UdpSocket;

use super::wire::{self, MAX_FLOWS, WireError, WireFlow};
use super::{Counters, IdBook};
use crate::config::cluster::ClusterSettings;

/// Starts the receiver, and the sender when the data plane reports flows. `deliver` hands
/// accepted flows to the writer. Fails when `listen` cannot be bound.
pub fn start(
    settings: &ClusterSettings,
    events: Option<RingBuf<MapData>>,
    book: Arc<RwLock<IdBook>>,
    counters: Arc<Counters>,
    deliver: impl Fn(Vec<WireFlow>) -> bool + Send + 'static,
) -> std::io::Result<()> {
    let std_socket = std::net::UdpSocket::bind(settings.listen)?;
    std_socket.set_nonblocking(true)?;
    let socket = Arc::new(UdpSocket::from_std(std_socket)?);
    tokio::spawn(receive(socket.clone(), settings.clone(), counters.clone(), deliver));
    if let Some(events) = events {
        tokio::spawn(send(events, socket, settings.clone(), book, counters));
    }
    Ok(())
}

/// A token bucket: `rate` messages a second, bursts up to `rate`.
struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: u32) -> Bucket {
        Bucket { rate: rate as f64, tokens: rate as f64, at: Instant::now() }
    }

    fn take(&mut self, now: Instant) -> bool {
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate).min(self.rate);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

async fn receive(
    socket: Arc<UdpSocket>,
    settings: ClusterSettings,
    counters: Arc<Counters>,
    deliver: impl Fn(Vec<WireFlow>) -> bool,
) {
    // A bucket per peer: a peer that floods (or a host that spoofs its address) is held to the
    // rate without holding up the others. Only peers get one, so the map stays as small as
    // the peer list.
    let mut buckets: HashMap<IpAddr, Bucket> = HashMap::new();
    let mut last_sequence: HashMap<IpAddr, u64> = HashMap::new();
    let mut buf = vec![0u8; 2048];
    let mut warned = Instant::now() - Duration::from_secs(60);
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(got) => got,
            Err(e) => {
                tracing::warn!(error = %e, "flow sharing: receive failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let refused = if !settings.peers.iter().any(|p| p.ip() == from.ip()) {
            Some((&counters.refused_not_peer, "not a peer"))
        } else if !buckets
            .entry(from.ip())
            .or_insert_with(|| Bucket::new(settings.max_messages_per_second))
            .take(Instant::now())
        {
            Some((&counters.refused_rate, "over max_messages_per_second"))
        } else {
            match wire::decode(&buf[..n], &settings.key) {
                Ok(message) if !fresh(message.sequence, last_sequence.get(&from.ip()).copied(), now_micros()) => {
                    Some((&counters.refused_replay, "replayed or stale (sequence)"))
                }
                Ok(message) => {
                    last_sequence.insert(from.ip(), message.sequence);
                    let flows = message.flows;
                    Counters::add(&counters.messages_received, 1);
                    Counters::add(&counters.flows_received, flows.len() as u64);
                    if !deliver(flows) {
                        return; // the writer has stopped
                    }
                    None
                }
                Err(WireError::BadMac) => Some((&counters.refused_bad_key, "wrong key")),
                Err(WireError::Malformed) => Some((&counters.refused_malformed, "malformed")),
            }
        };
        if let Some((counter, why)) = refused {
            Counters::add(counter, 1);
            // One line a minute at most: a flood must not flood the log too.
            if warned.elapsed() > Duration::from_secs(60) {
                warned = Instant::now();
                tracing::warn!(%from, why, "flow sharing: message refused (counted; further ones for a minute only counted)");
            }
        }
    }
}

async fn send(
    events: RingBuf<MapData>,
    socket: Arc<UdpSocket>,
    settings: ClusterSettings,
    book: Arc<RwLock<IdBook>>,
    counters: Arc<Counters>,
) {
    // SAFETY: the ring buffer owns its descriptor, open and unchanged until the AsyncFd (which
    // owns the ring buffer) is dropped.
    let registered = unsafe { AsyncFd::register_with_interest(events, tokio::io::Interest::READABLE) };
    let mut events = match registered {
        Ok(fd) => fd,
        Err(e) => {
            tracing::error!(error = %e, "flow sharing: cannot watch FLOW_EVENTS; flows are not shared");
            return;
        }
    };
    let mut sequence = 0u64;
    loop {
        let mut guard = match events.readable_mut().await {
            Ok(guard) => guard,
            Err(e) => {
                tracing::error!(error = %e, "flow sharing: FLOW_EVENTS failed; flows are no longer shared");
                return;
            }
        };
        let mut flows = Vec::new();
        {
            let ring = guard.get_inner_mut();
            let book = book.read().expect("the id book is never poisoned");
            while let Some(item) = ring.next() {
                if item.len() < size_of::<SharedFlow>() {
                    continue;
                }
                // SAFETY: the program writes whole SharedFlow records (plain old data).
                let event: SharedFlow = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
                if let Some(flow) = addresses(&event, &book) {
                    flows.push(flow);
                }
            }
        }
        guard.clear_ready();
        for batch in flows.chunks(MAX_FLOWS) {
            // Strictly increasing, and near the clock: what receivers check (`fresh`).
            sequence = now_micros().max(sequence + 1);
            let message = wire::encode(sequence, batch, &settings.key);
            for peer in &settings.peers {
                match socket.send_to(&message, peer).await {
                    Ok(_) => {
                        Counters::add(&counters.messages_sent, 1);
                        Counters::add(&counters.flows_sent, batch.len() as u64);
                    }
                    Err(e) => tracing::debug!(%peer, error = %e, "flow sharing: send failed"),
                }
            }
        }
    }
}

/// How far a message's sequence (its sender's clock) may be from the receiver's clock.
const CLOCK_SKEW_MICROS: u64 = 30_000_000;

fn now_micros() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Whether a message numbered `sequence` is new from its sender (after `last`, the sequence
/// last accepted from it) and near the clock (`now`, µs): a captured message played again is
/// neither.
fn fresh(sequence: u64, last: Option<u64>, now: u64) -> bool {
    last.is_none_or(|last| sequence > last) && sequence.abs_diff(now) <= CLOCK_SKEW_MICROS
}

/// The flow by addresses; None for ids this node no longer knows (changed meanwhile).
fn addresses(event: &SharedFlow, book: &IdBook) -> Option<WireFlow> {
    let vip = book.vips.get(&event.vip_id)?;
    let backend = *book.backends.get(&event.backend_id)?;
    let key = &event.key;
    let ip = |bytes: &lb_common::IpBytes| match key.family {
        lb_common::family::IPV6 => std::net::IpAddr::from(*bytes),
        _ => std::net::IpAddr::from(lb_common::ipv4_octets(bytes)),
    };
    Some(WireFlow {
        protocol: key.protocol,
        client: SocketAddr::new(ip(&key.src), u16::from_be(key.src_port)),
        vip: SocketAddr::new(vip.address, vip.port),
        backend,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_flow_is_shared_with_its_ipv6_client() {
        use crate::config::VipIdentity;
        let client: std::net::Ipv6Addr = "2001:db8:ffff::7".parse().unwrap();
        let vip = VipIdentity { address: "2001:db8::10".parse().unwrap(), port: 80, ip_proto: 6 };
        let backend: SocketAddr = "[2001:db8::21]:80".parse().unwrap();
        let book = IdBook { vips: [(3, vip)].into(), backends: [(9, backend)].into() };
        let key = lb_common::flow::FlowKey::new(
            client.octets(),
            lb_common::ip_bytes(vip.address).0,
            40000u16.to_be(),
            80u16.to_be(),
            6,
            lb_common::family::IPV6,
        );
        let flow = addresses(&SharedFlow { key, backend_id: 9, vip_id: 3 }, &book).unwrap();
        assert_eq!(flow.client, SocketAddr::new(client.into(), 40000));
        assert_eq!((flow.vip, flow.backend), ("[2001:db8::10]:80".parse().unwrap(), backend));
    }

    #[test]
    fn a_message_counts_once_and_only_near_the_clock() {
        let now = 1_700_000_000_000_000;
        assert!(fresh(now, None, now));
        assert!(fresh(now + 1, Some(now), now));
        assert!(!fresh(now, Some(now), now), "played again");
        assert!(!fresh(now - 5, Some(now), now), "older than the last accepted");
        assert!(!fresh(now - CLOCK_SKEW_MICROS - 1, None, now), "too old");
        assert!(!fresh(now + CLOCK_SKEW_MICROS + 1, None, now), "from the future");
    }

    #[test]
    fn the_bucket_allows_its_rate_and_refills() {
        let mut b = Bucket::new(3);
        let t0 = b.at;
        assert!((0..3).all(|_| b.take(t0)));
        assert!(!b.take(t0), "the burst is spent");
        assert!(b.take(t0 + Duration::from_millis(400)), "a third of a second refills one");
    }
}
