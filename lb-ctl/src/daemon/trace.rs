//! The daemon's side of `lb-ctl trace`: the writer turns a trace request into a filter slot
//! of TRACE (the data plane's one writer writes it), and a reader task takes the records off
//! TRACE_EVENTS, decodes them and hands each to the traces whose filter matched it.
//!
//! A trace's filter lives as long as its session: the session's guard sends
//! `Command::TraceStop` when the API stream is dropped (the client went away, however it went).
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use lb_common::family;
use lb_common::stats::Counter;
use lb_common::trace::{
    DEFAULT_TRACE_BUDGET, MAX_TRACES, TRACE_NONE, TraceControl, TraceFilter, TraceRecord, trace_kind, trace_stats,
};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::writer::Writer;
use crate::api::ApiError;
use crate::api::trace::{TraceEvent, TraceRequest, TraceStats, TracedPacket};
use crate::config::Forwarding;
use crate::dataplane::TraceMaps;

/// Events a trace's client may be behind by before further ones are counted `lost`.
const CLIENT_BACKLOG: usize = 4096;
/// Largest per-CPU budget a trace may ask for (records a second).
const MAX_BUDGET: u32 = 1_000_000;

/// What the ids of one trace's records are called (as when the trace started).
#[derive(Default)]
struct Labels {
    /// VIP id → label and forwarding.
    vips: HashMap<u32, (String, Forwarding)>,
    /// Backend id → `ADDR:PORT`.
    backends: HashMap<u32, String>,
}

struct Subscriber {
    tx: mpsc::Sender<TraceEvent>,
    labels: Labels,
    stats: TraceStats,
    /// TRACE_STATS totals when the trace started.
    baseline: (u64, u64),
}

#[derive(Default)]
struct Shared {
    slots: [Option<Subscriber>; MAX_TRACES],
    /// TRACE_STATS totals (over budget, ring full) at the reader's last tick.
    totals: (u64, u64),
}

/// The writer's part: the filters in force and the traces they belong to.
#[derive(Default)]
pub(super) struct Traces {
    /// None: the data plane cannot trace (no XDP program).
    shared: Option<Arc<Mutex<Shared>>>,
    control: TraceControl,
    budgets: [u32; MAX_TRACES],
}

impl Traces {
    /// Starts the reader of `maps` (None: tracing unavailable).
    pub(super) fn start(maps: Option<TraceMaps>) -> Traces {
        let Some(maps) = maps else { return Traces::default() };
        let shared = Arc::new(Mutex::new(Shared::default()));
        tokio::spawn(read(maps, shared.clone()));
        Traces { shared: Some(shared), ..Traces::default() }
    }

    /// Ends every trace (the daemon stops): their streams end.
    pub(super) fn close(&mut self) {
        if let Some(shared) = &self.shared {
            shared.lock().expect("trace registry").slots = Default::default();
        }
    }
}

impl Writer {
    /// Starts a trace: a free filter slot, written to TRACE. Returns the slot and its events.
    pub(super) fn trace_start(&mut self, r: &TraceRequest) -> Result<(usize, mpsc::Receiver<TraceEvent>), ApiError> {
        let Some(shared) = self.traces.shared.clone() else {
            return Err(ApiError::not_found("this daemon has no XDP data plane to trace"));
        };
        let filter = self.trace_filter(r)?;
        let budget = match r.budget {
            None => DEFAULT_TRACE_BUDGET,
            Some(b @ 1..=MAX_BUDGET) => b,
            Some(b) => {
                return Err(ApiError::bad_request(format!("budget {b}: give 1 to {MAX_BUDGET} records a second")));
            }
        };
        let mut registry = shared.lock().expect("trace registry");
        let Some(slot) = registry.slots.iter().position(Option::is_none) else {
            return Err(ApiError::new(
                axum::http::StatusCode::CONFLICT,
                format!("{MAX_TRACES} traces are running already; end one first"),
            ));
        };
        let mut control = self.traces.control;
        control.filters[slot] = filter;
        control.active |= 1 << slot;
        self.traces.budgets[slot] = budget;
        control.budget = smallest_budget(&control, &self.traces.budgets);
        self.dp.set_trace(&control)?;
        self.traces.control = control;
        let (tx, rx) = mpsc::channel(CLIENT_BACKLOG);
        let baseline = registry.totals;
        registry.slots[slot] =
            Some(Subscriber { tx, labels: self.trace_labels(), stats: TraceStats::default(), baseline });
        tracing::info!(slot, request = ?r, "trace started");
        Ok((slot, rx))
    }

    /// Ends the trace of `slot`: its filter is removed from TRACE.
    pub(super) fn trace_stop(&mut self, slot: usize) {
        let Some(shared) = &self.traces.shared else { return };
        shared.lock().expect("trace registry").slots[slot] = None;
        let mut control = self.traces.control;
        control.active &= !(1 << slot);
        control.filters[slot] = TraceFilter::ANY;
        control.budget = smallest_budget(&control, &self.traces.budgets);
        match self.dp.set_trace(&control) {
            Ok(()) => tracing::info!(slot, "trace ended; its filter is removed"),
            Err(e) => tracing::error!(slot, error = %e, "trace ended, but its filter could not be removed"),
        }
        self.traces.control = control;
    }

    fn trace_filter(&self, r: &TraceRequest) -> Result<TraceFilter, ApiError> {
        let mut filter = TraceFilter::ANY;
        let vip = match &r.vip {
            Some(reference) => {
                let v = self.state.find_vip(reference)?;
                if !v.forwarding.is_xdp() {
                    return Err(ApiError::bad_request(format!(
                        "VIP {:?} is served by the userspace proxy; trace covers XDP VIPs",
                        v.label()
                    )));
                }
                filter.vip_id = v.id;
                Some(v)
            }
            None => None,
        };
        if let Some(b) = &r.backend {
            filter.backend_id = self.trace_backend(b, vip.map(|v| v.id))?;
        }
        if let Some(c) = &r.client {
            let net = match c.parse::<ipnet::IpNet>() {
                Ok(net) => net,
                Err(_) => match c.parse::<IpAddr>() {
                    Ok(ip) => ipnet::IpNet::from(ip),
                    Err(_) => {
                        return Err(ApiError::bad_request(format!(
                            "malformed client {c:?}: expected ADDR or ADDR/LEN (192.0.2.7, 192.0.2.0/24, 2001:db8::/32)"
                        )));
                    }
                },
            };
            let (addr, fam) = lb_common::ip_bytes(net.network());
            filter.client = addr;
            filter.client_mask = lb_common::ip_bytes(net.netmask()).0;
            filter.client_family = fam;
        }
        for v in &r.verdict {
            filter.actions |= 1 << action_of(v)?;
        }
        Ok(filter)
    }

    /// The id of backend `reference` (`ADDR:PORT`, or `ADDR`), within VIP `vip` if given.
    fn trace_backend(&self, reference: &str, vip: Option<u32>) -> Result<u32, ApiError> {
        let wanted: Box<dyn Fn(SocketAddr) -> bool> = match reference.parse::<SocketAddr>() {
            Ok(sa) => Box::new(move |a| a == sa),
            Err(_) => match reference.trim_matches(['[', ']']).parse::<IpAddr>() {
                Ok(ip) => Box::new(move |a: SocketAddr| a.ip() == ip),
                Err(_) => {
                    return Err(ApiError::bad_request(format!(
                        "malformed backend {reference:?}: expected ADDR:PORT or ADDR ([ADDR]:PORT for IPv6)"
                    )));
                }
            },
        };
        let ids: Vec<u32> = self
            .state
            .vips
            .iter()
            .filter(|v| v.forwarding.is_xdp() && vip.is_none_or(|id| id == v.id))
            .flat_map(|v| v.backends.iter())
            .filter(|b| wanted(b.address))
            .map(|b| b.id)
            .collect();
        match ids.as_slice() {
            [] => Err(ApiError::not_found(format!(
                "no backend {reference} (of an XDP VIP{})",
                match vip {
                    Some(_) => " given",
                    None => "",
                }
            ))),
            [one] => Ok(*one),
            _ => Err(ApiError::bad_request(format!(
                "backend {reference} serves several VIPs (or has several ports): name the VIP too (--vip), or give ADDR:PORT"
            ))),
        }
    }

    fn trace_labels(&self) -> Labels {
        let mut labels = Labels::default();
        for v in &self.state.vips {
            labels.vips.insert(v.id, (v.label(), v.forwarding));
            for b in &v.backends {
                labels.backends.insert(b.id, b.address.to_string());
            }
        }
        labels
    }
}

/// The smallest budget of the traces running (the program has one budget for them all).
fn smallest_budget(control: &TraceControl, budgets: &[u32; MAX_TRACES]) -> u32 {
    (0..MAX_TRACES).filter(|i| control.active & (1 << i) != 0).map(|i| budgets[i]).min().unwrap_or(DEFAULT_TRACE_BUDGET)
}

/// XDP action numbers by name.
const ACTIONS: [(&str, u32); 5] = [("aborted", 0), ("drop", 1), ("pass", 2), ("tx", 3), ("redirect", 4)];

fn action_of(name: &str) -> Result<u32, ApiError> {
    ACTIONS.iter().find(|(n, _)| *n == name).map(|(_, a)| *a).ok_or_else(|| {
        ApiError::bad_request(format!("unknown verdict {name:?}: expected pass, drop, tx, redirect or aborted"))
    })
}

fn action_name(action: u32) -> String {
    ACTIONS.iter().find(|(_, a)| *a == action).map_or_else(|| format!("action {action}"), |(n, _)| n.to_string())
}

/// Reads TRACE_EVENTS until the daemon stops, and every second TRACE_STATS (each trace gets a
/// `stats` line then: what it missed, and a write that tells the server when its client left).
async fn read(maps: TraceMaps, shared: Arc<Mutex<Shared>>) {
    let TraceMaps { events, stats } = maps;
    // SAFETY: the ring buffer owns its descriptor, open until the AsyncFd (its owner) drops.
    let mut events = match unsafe { AsyncFd::register_with_interest(events, tokio::io::Interest::READABLE) } {
        Ok(fd) => fd,
        Err(e) => {
            tracing::error!(error = %e, "trace: cannot watch TRACE_EVENTS; traces will show nothing");
            return;
        }
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            ready = events.readable_mut() => {
                let mut guard = match ready {
                    Ok(guard) => guard,
                    Err(e) => {
                        tracing::error!(error = %e, "trace: TRACE_EVENTS failed; traces show nothing more");
                        return;
                    }
                };
                let clock = Clock::now();
                let mut registry = shared.lock().expect("trace registry");
                let ring = guard.get_inner_mut();
                while let Some(item) = ring.next() {
                    if item.len() < size_of::<TraceRecord>() {
                        continue;
                    }
                    // SAFETY: the program writes whole TraceRecords (plain old data).
                    let record: TraceRecord = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
                    deliver(&mut registry, &record, &clock);
                }
                drop(registry);
                guard.clear_ready();
            }
            _ = tick.tick() => {
                let sum = |index| stats.get(&index, 0).map(|v| v.iter().sum::<u64>()).unwrap_or(0);
                let totals = (sum(trace_stats::OVER_BUDGET), sum(trace_stats::RING_FULL));
                let mut registry = shared.lock().expect("trace registry");
                registry.totals = totals;
                for s in registry.slots.iter_mut().flatten() {
                    s.stats.over_budget = totals.0.saturating_sub(s.baseline.0);
                    s.stats.ring_full = totals.1.saturating_sub(s.baseline.1);
                    let _ = s.tx.try_send(TraceEvent::Stats(s.stats.clone()));
                }
            }
        }
    }
}

/// Hands `record` to every trace whose filter it matched.
fn deliver(registry: &mut Shared, record: &TraceRecord, clock: &Clock) {
    for (slot, s) in registry.slots.iter_mut().enumerate() {
        let Some(s) = s else { continue };
        if record.matched & (1 << slot) == 0 {
            continue;
        }
        let event = TraceEvent::Packet(Box::new(decode(record, &s.labels, clock)));
        match s.tx.try_send(event) {
            Ok(()) => s.stats.shown += 1,
            Err(_) => s.stats.lost += 1,
        }
    }
}

/// Monotonic time (the program's clock) to wall-clock time.
struct Clock {
    wall: SystemTime,
    monotonic_ns: u64,
}

impl Clock {
    fn now() -> Clock {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes the timespec passed.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Clock { wall: SystemTime::now(), monotonic_ns: ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64 }
    }

    fn wall(&self, monotonic_ns: u64) -> SystemTime {
        self.wall - Duration::from_nanos(self.monotonic_ns.saturating_sub(monotonic_ns))
    }
}

fn ip(bytes: &[u8; 16], fam: u8) -> IpAddr {
    if fam == family::IPV6 {
        IpAddr::V6(Ipv6Addr::from(*bytes))
    } else {
        IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))
    }
}

fn tcp_flags(flags: u8) -> String {
    [(0x02, 'S'), (0x10, 'A'), (0x01, 'F'), (0x04, 'R'), (0x08, 'P'), (0x20, 'U')]
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, c)| *c)
        .collect()
}

/// A record in words.
fn decode(r: &TraceRecord, labels: &Labels, clock: &Clock) -> TracedPacket {
    let key = &r.key;
    let (src, dst) = (ip(&key.src, key.family), ip(&key.dst, key.family));
    let reason = Counter::ALL.get(r.reason as usize).copied();
    let decision = Counter::ALL
        .iter()
        .enumerate()
        .filter(|(i, c)| *i < 64 && r.counted & (1 << i) != 0 && Some(**c) != reason)
        .map(|(_, c)| c.name().to_string())
        .collect();
    let some = |id: u32| (id != TRACE_NONE).then_some(id);
    let vip = some(r.vip_id).and_then(|id| labels.vips.get(&id));
    let protocol = match key.protocol {
        lb_common::ip_proto::TCP => "tcp".to_string(),
        lb_common::ip_proto::UDP => "udp".to_string(),
        p => format!("protocol {p}"),
    };
    let sent = matches!(r.action, 3 | 4);
    let out = Out::parse(&r.packet[..(r.captured as usize).min(r.packet.len())]);
    let rewritten = sent || reason == Some(Counter::PassNoNeighbour);
    let rewrite = out.as_ref().filter(|_| rewritten).map(|o| match (r.kind, vip.map(|v| v.1)) {
        (trace_kind::REPLY, _) => format!("nat from {}", o.src_socket()),
        (_, Some(Forwarding::DsrIpip)) => format!("ipip {} > {}", o.src, o.dst),
        (_, Some(Forwarding::DsrGue)) => format!("gue {} > {}", o.src, o.dst),
        (_, Some(Forwarding::DsrL2)) => "mac".to_string(),
        _ => format!("nat to {}", o.dst_socket()),
    });
    TracedPacket {
        time: humantime::format_rfc3339_micros(clock.wall(r.time_ns)).to_string(),
        cpu: r.cpu,
        family: if key.family == family::IPV6 { "ipv6" } else { "ipv4" }.to_string(),
        protocol,
        src: SocketAddr::new(src, u16::from_be(key.src_port)).to_string(),
        dst: SocketAddr::new(dst, u16::from_be(key.dst_port)).to_string(),
        tcp_flags: tcp_flags(r.tcp_flags),
        kind: if r.kind == trace_kind::REPLY { "reply" } else { "vip" }.to_string(),
        vip: vip.map(|v| v.0.clone()),
        vip_id: some(r.vip_id),
        backend: some(r.backend_id)
            .map(|id| labels.backends.get(&id).cloned().unwrap_or_else(|| format!("backend id {id}"))),
        backend_id: some(r.backend_id),
        ring_slot: some(r.ring_slot),
        decision,
        verdict: action_name(r.action),
        reason: reason.map_or_else(|| format!("counter {}", r.reason), |c| c.name().to_string()),
        rewrite,
        next_hop: out.filter(|_| sent).map(|o| o.dmac),
        ifindex: r.ifindex,
    }
}

/// The outer headers of a packet as the program left it.
#[derive(Debug)]
struct Out {
    dmac: String,
    src: IpAddr,
    dst: IpAddr,
    ports: Option<(u16, u16)>,
}

impl Out {
    /// Ethernet (one 802.1Q tag at most), IPv4 or IPv6, and the ports of TCP or UDP.
    fn parse(b: &[u8]) -> Option<Out> {
        let dmac = b.get(..6)?.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(":");
        let mut at = 12;
        let mut ether_type = u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]);
        if ether_type == 0x8100 {
            at += 4;
            ether_type = u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]);
        }
        let l3 = at + 2;
        let (src, dst, protocol, l4) = match ether_type {
            0x0800 => {
                let h = b.get(l3..l3 + 20)?;
                let l4 = l3 + (h[0] & 0xf) as usize * 4;
                let a = |o: usize| IpAddr::V4(Ipv4Addr::new(h[o], h[o + 1], h[o + 2], h[o + 3]));
                (a(12), a(16), h[9], l4)
            }
            0x86dd => {
                let h = b.get(l3..l3 + 40)?;
                let a = |o: usize| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&h[o..o + 16]).expect("16 bytes")));
                (a(8), a(24), h[6], l3 + 40)
            }
            _ => return None,
        };
        let ports = matches!(protocol, 6 | 17)
            .then(|| b.get(l4..l4 + 4).map(|p| (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]]))))
            .flatten();
        Some(Out { dmac, src, dst, ports })
    }

    fn src_socket(&self) -> String {
        self.ports.map_or_else(|| self.src.to_string(), |(s, _)| SocketAddr::new(self.src, s).to_string())
    }

    fn dst_socket(&self) -> String {
        self.ports.map_or_else(|| self.dst.to_string(), |(_, d)| SocketAddr::new(self.dst, d).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_names_and_mistakes() {
        assert_eq!(action_of("tx").unwrap(), 3);
        assert_eq!(action_name(4), "redirect");
        let e = action_of("forward").unwrap_err();
        assert!(e.message.contains("unknown verdict \"forward\""), "{}", e.message);
    }

    #[test]
    fn tcp_flags_read_as_letters() {
        assert_eq!(tcp_flags(0x02), "S");
        assert_eq!(tcp_flags(0x12), "SA");
        assert_eq!(tcp_flags(0x11), "AF");
        assert_eq!(tcp_flags(0), "");
    }
}
