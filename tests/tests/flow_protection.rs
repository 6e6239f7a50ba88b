//! Golden packets for what keeps established flows alive under churn, floods and id reuse:
//! a NAT flow's reply entry kept in step with its forward entry, first packets that cannot
//! evict proven flows while they live (closed or idle ones give way), the per-CPU new-flow
//! budget, and backend ids bound to their generation. Each test runs on a balancer of its own (its random table seed must not put
//! other cases' flows in the set under test). Needs root, like the golden suite.
use aya::maps::{Array, MapData};
use lb_common::backend::{BACKEND_ACTIVE, Backend};
use lb_common::config::DataplaneConfig;
use lb_common::flow::{
    CLOSED, FLOW_WAYS, FlowEntry, FlowKey, FlowSet, FlowValue, PROTECT_IDLE_TICKS, PROVEN, REPLY_CHECK_SHIFT,
    REPLY_LOST, ReverseEntry, ReverseSet, STAMP_FLAGS,
};
use lb_common::hash::{client_hash, flow_hash};
use lb_common::stats::Counter;
use lb_common::{family, ip_proto, ipv4_bytes, map_names};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_tests::fixture::*;
use lb_tests::golden::*;
use lb_tests::netns::{Netns, ifindex};
use lb_tests::packets::{Frame, L4};
use lb_tests::privileges::require_root;

const WEB: [u8; 4] = [203, 0, 113, 10];

/// A fresh balancer with the fixture's VIPs, in a lab of its own.
fn setup() -> (Netns, AyaDataplane, Vec<Vip>) {
    let ns = lab();
    let mut dp = {
        let _inside = ns.enter();
        balancer()
    };
    let vips = vips();
    configure(&mut dp, &vips);
    (ns, dp, vips)
}

/// Empties the REVERSE_FLOWS set of `reply` (as if churn had evicted its entry).
fn evict_reply_entry(dp: &mut AyaDataplane, reply: &FlowKey) {
    let set = dp.flow_set_of(reply);
    let map = dp.ebpf_mut().map_mut(map_names::REVERSE_FLOWS).expect("REVERSE_FLOWS");
    let mut table: Array<&mut MapData, ReverseSet> = Array::try_from(map).unwrap();
    table.set(set, ReverseSet::default(), 0).unwrap();
}

/// The stamp (`used`) of `key`'s way in table `name`, if the table holds it.
fn stamp<V: FlowValue>(dp: &mut AyaDataplane, name: &str, key: &FlowKey) -> Option<u32>
where
    FlowSet<V>: aya::Pod,
{
    let set = dp.flow_set_of(key);
    let map = dp.ebpf_mut().map_mut(name).expect("table");
    let table: Array<&mut MapData, FlowSet<V>> = Array::try_from(map).unwrap();
    table.get(&set, 0).unwrap().ways.iter().find(|w| w.check != 0 && w.key == *key).map(|w| w.used)
}

/// Makes the ways of `key`'s set in table `name` for which `which` holds look idle for `ticks`
/// more kernel ticks.
fn age_ways<V: Copy>(dp: &mut AyaDataplane, name: &str, key: &FlowKey, ticks: u32, which: impl Fn(&FlowKey) -> bool)
where
    FlowSet<V>: aya::Pod,
{
    let set = dp.flow_set_of(key);
    let map = dp.ebpf_mut().map_mut(name).expect("table");
    let mut table: Array<&mut MapData, FlowSet<V>> = Array::try_from(map).unwrap();
    let mut ways = table.get(&set, 0).unwrap();
    for way in ways.ways.iter_mut().filter(|w| which(&w.key)) {
        way.used = (way.used & !STAMP_FLAGS).wrapping_sub(ticks) | (way.used & STAMP_FLAGS);
    }
    table.set(set, ways, 0).unwrap();
}

/// Makes the ways of `key`'s REVERSE_FLOWS set for which `which` holds look idle for `ticks`
/// more kernel ticks.
fn age_reply_ways(dp: &mut AyaDataplane, key: &FlowKey, ticks: u32, which: impl Fn(&FlowKey) -> bool) {
    age_ways::<ReverseEntry>(dp, map_names::REVERSE_FLOWS, key, ticks, which);
}

/// Makes `key`'s FLOWS way look a reply-check period older: its next packet is the first of a
/// period, which checks the reply entry even unmarked.
fn next_reply_check_period(dp: &mut AyaDataplane, key: &FlowKey) {
    age_ways::<FlowEntry>(dp, map_names::FLOWS, key, 1 << REPLY_CHECK_SHIFT, |k| k == key);
}

/// Whether a way's flow is proven or closed, from its stamp (the other flags masked).
fn life(stamp: Option<u32>) -> Option<u32> {
    stamp.map(|u| u & (PROVEN | CLOSED))
}

/// Runs the cases in order, then fails with every case that failed.
fn run_all(dp: &mut AyaDataplane, cases: Vec<Case>) {
    let g0 = ifindex("g0");
    let failed: Vec<String> =
        cases.iter().filter_map(|c| run_case(dp, g0, c).err().map(|e| format!("{}: {e}", c.name))).collect();
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
}

fn with_events(mut c: Case, events: &[Counter]) -> Case {
    c.events = events.to_vec();
    c
}

#[test]
fn a_nat_flow_keeps_its_reply_entry() {
    if !require_root("a_nat_flow_keeps_its_reply_entry") {
        return;
    }
    let (ns, mut dp, vips) = setup();
    let _inside = ns.enter();
    let conns = connections_in_one_reply_set(&dp, &vips, FLOW_WAYS + 1);
    let (a, later) = (&conns[0], &conns[1..]);
    run_all(&mut dp, a.opens());
    // Established connections the table lost (their ACKs prove them) take the rest of a's reply
    // set, then one more: it evicts the least recently used reply entry, a's, and marks a's
    // forward way.
    let lost =
        later.iter().map(|c| c.client("ACK of a connection the table lost: recorded", L4::TcpAck, &[])).collect();
    run_all(&mut dp, lost);
    assert_eq!(
        stamp::<ReverseEntry>(&mut dp, map_names::REVERSE_FLOWS, &a.reply_key()),
        None,
        "a's reply entry was evicted"
    );
    let marked = stamp::<FlowEntry>(&mut dp, map_names::FLOWS, &a.forward_key()).expect("a's forward entry");
    assert_ne!(marked & REPLY_LOST, 0, "the eviction marks the flow's way");
    let mut again = a.client("next client packet: entry there, nothing restored", L4::TcpAck, &[Counter::FlowHit]);
    again.unchanged = vec![Counter::ReverseRestored];
    run_all(
        &mut dp,
        vec![
            // The backend serves two VIPs: without its entry the reply cannot be given one.
            a.backend_dropped("the backend's reply, its entry evicted: dropped, never leaked"),
            a.client(
                "the next client packet: its entry written again at once",
                L4::TcpAck,
                &[Counter::FlowHit, Counter::ReverseRestored],
            ),
            a.backend("the backend's reply: back to the VIP", L4::TcpAck),
            again,
        ],
    );
    let kept = stamp::<FlowEntry>(&mut dp, map_names::FLOWS, &a.forward_key()).expect("a's forward entry");
    assert_eq!(kept & REPLY_LOST, 0, "the mark goes once the entry is written again");
    // An entry gone without a mark (two CPUs writing its way at once) is written again by the
    // flow's first packet of the next reply-check period.
    evict_reply_entry(&mut dp, &a.reply_key());
    next_reply_check_period(&mut dp, &a.forward_key());
    run_all(
        &mut dp,
        vec![
            a.client(
                "first client packet of a period, entry gone unmarked: written again",
                L4::TcpAck,
                &[Counter::FlowHit, Counter::ReverseRestored],
            ),
            a.backend("the backend's reply: back to the VIP", L4::TcpAck),
        ],
    );
}

#[test]
fn first_packets_cannot_evict_proven_flows() {
    if !require_root("first_packets_cannot_evict_proven_flows") {
        return;
    }
    let (ns, mut dp, vips) = setup();
    let _inside = ns.enter();
    let flow_vip = &vips[8];
    let addr = flow_vip.addr;
    let pick = |port: u16| {
        by_hash(
            flow_vip,
            flow_hash(&ipv4_bytes(CLIENT), &ipv4_bytes(addr), port.to_be(), 80u16.to_be(), ip_proto::TCP, SEED),
        )
    };
    let set_of = |port: u16| dp.flow_set_of(&flow_key(CLIENT, addr, port, 80));
    let same_set = ports_in_one_set(set_of, FLOW_WAYS + 2);
    let packet = |port: u16, l4: L4| {
        let f = Frame::tcp(CLIENT, port, addr, 80).with(|f| f.l4 = l4);
        let out = nat_out(&f, (CLIENT, port), pick(port), LB_MAC, mac_of(pick(port).0));
        (f.bytes(), out)
    };
    let mut cases = Vec::new();
    for &port in &same_set[..FLOW_WAYS] {
        let (syn, out) = packet(port, L4::TcpSyn);
        cases.push(with_events(
            case("a connection opens (SYN)", syn, XDP_TX, Some(out), Counter::ForwardTx),
            &[Counter::FlowNew],
        ));
        let (ack, out) = packet(port, L4::TcpAck);
        cases.push(with_events(
            case("and proves itself (ACK)", ack, XDP_TX, Some(out), Counter::ForwardTx),
            &[Counter::FlowHit],
        ));
    }
    let (syn, out) = packet(same_set[FLOW_WAYS], L4::TcpSyn);
    let mut c = case(
        "a 5th SYN in the full set of proven flows: placed by the ring, evicts nothing",
        syn,
        XDP_TX,
        Some(out),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowSetProven];
    c.unchanged = vec![Counter::FlowTableFull, Counter::FlowNew];
    cases.push(c);
    run_all(&mut dp, cases);
    let recorded = |dp: &AyaDataplane, port: u16| dp.lookup_flow(&flow_key(CLIENT, addr, port, 80)).unwrap().is_some();
    let kept: Vec<bool> = same_set[..=FLOW_WAYS].iter().map(|p| recorded(&dp, *p)).collect();
    assert_eq!(kept, [true, true, true, true, false], "ways after the SYN, ports {same_set:?}");
    // A packet of an open connection the table does not hold (no SYN) has proven itself: it
    // takes the least recently used way.
    std::thread::sleep(std::time::Duration::from_millis(25));
    let (ack, out) = packet(same_set[FLOW_WAYS + 1], L4::TcpAck);
    run_all(
        &mut dp,
        vec![with_events(
            case(
                "ACK of a connection the table lost: recorded, in place of the oldest",
                ack,
                XDP_TX,
                Some(out),
                Counter::ForwardTx,
            ),
            &[Counter::FlowTableFull],
        )],
    );
    assert!(recorded(&dp, same_set[FLOW_WAYS + 1]));
    assert!(!recorded(&dp, same_set[0]), "the least recently used way gave way");
}

/// One NAT connection to `web` (the fixture's first VIP, placed by client address; its
/// backends also serve another VIP, so their replies need their entries) from CLIENT:`port`,
/// on backend `b`.
struct Connection {
    port: u16,
    b: ([u8; 4], u16),
}

impl Connection {
    /// A packet of the client's, sent on to the backend.
    fn client(&self, name: &'static str, l4: L4, events: &[Counter]) -> Case {
        let f = Frame::tcp(CLIENT, self.port, WEB, 80).with(|f| f.l4 = l4);
        let out = nat_out(&f, (CLIENT, self.port), self.b, LB_MAC, mac_of(self.b.0));
        with_events(case(name, f.bytes(), XDP_TX, Some(out), Counter::ForwardTx), events)
    }

    /// A packet of the backend's, sent back to the client from the VIP.
    fn backend(&self, name: &'static str, l4: L4) -> Case {
        let f = Frame::tcp(self.b.0, self.b.1, CLIENT, self.port).with(|f| {
            f.l4 = l4;
            f.src_mac = mac_of(self.b.0)
        });
        let out = nat_out(&f, (WEB, 80), (CLIENT, self.port), LB_MAC, CLIENT_MAC);
        with_events(case(name, f.bytes(), XDP_TX, Some(out), Counter::ForwardTx), &[Counter::NatReply])
    }

    /// The backend's answer when no reply entry names it: dropped, never leaked.
    fn backend_dropped(&self, name: &'static str) -> Case {
        let f = Frame::tcp(self.b.0, self.b.1, CLIENT, self.port).with(|f| {
            f.l4 = L4::TcpAck;
            f.src_mac = mac_of(self.b.0)
        });
        case(name, f.bytes(), XDP_DROP, None, Counter::DropReplyNoFlow)
    }

    fn opens(&self) -> Vec<Case> {
        vec![
            self.client("SYN", L4::TcpSyn, &[Counter::FlowNew]),
            self.backend("SYN-ACK", L4::TcpAck),
            self.client("ACK: proven", L4::TcpAck, &[Counter::FlowHit]),
        ]
    }

    fn forward_key(&self) -> FlowKey {
        flow_key(CLIENT, WEB, self.port, 80)
    }

    fn reply_key(&self) -> FlowKey {
        flow_key(self.b.0, CLIENT, self.b.1, self.port)
    }
}

/// `count` connections of `web` whose reply keys share one REVERSE_FLOWS set.
fn connections_in_one_reply_set(dp: &AyaDataplane, vips: &[Vip], count: usize) -> Vec<Connection> {
    let b = by_hash(&vips[0], client_hash(&ipv4_bytes(CLIENT), SEED));
    let conn = |port| Connection { port, b };
    let set = dp.flow_set_of(&conn(40000).reply_key());
    (40000..=u16::MAX).map(conn).filter(|c| dp.flow_set_of(&c.reply_key()) == set).take(count).collect()
}

#[test]
fn closed_connections_give_their_ways_to_new_ones() {
    if !require_root("closed_connections_give_their_ways_to_new_ones") {
        return;
    }
    let (ns, mut dp, vips) = setup();
    let _inside = ns.enter();
    let conns = connections_in_one_reply_set(&dp, &vips, FLOW_WAYS + 1);
    let mut cases = Vec::new();
    // Every way of the reply set taken by a connection that then ends: three by FINs both
    // ways, the fourth by the backend's RST.
    for c in &conns[..FLOW_WAYS - 1] {
        cases.extend(c.opens());
        cases.push(c.client("client FIN", L4::TcpFin, &[Counter::FlowHit]));
        cases.push(c.backend("backend FIN", L4::TcpFin));
        cases.push(c.client("last ACK: still forwarded", L4::TcpAck, &[Counter::FlowHit]));
    }
    let reset = &conns[FLOW_WAYS - 1];
    cases.extend(reset.opens());
    cases.push(reset.backend("backend RST", L4::TcpRst));
    run_all(&mut dp, cases);
    for c in &conns[..FLOW_WAYS] {
        let forward = stamp::<lb_common::flow::FlowEntry>(&mut dp, map_names::FLOWS, &c.forward_key());
        let reply = stamp::<lb_common::flow::ReverseEntry>(&mut dp, map_names::REVERSE_FLOWS, &c.reply_key());
        assert_eq!(life(forward), Some(CLOSED), "forward entry of port {}", c.port);
        assert_eq!(life(reply), Some(CLOSED), "reply entry of port {}", c.port);
    }
    // A new connection whose reply falls in that set: its reply entry takes a closed way.
    let new = &conns[FLOW_WAYS];
    run_all(
        &mut dp,
        vec![
            new.client("a new connection's SYN, its reply set full of closed ones", L4::TcpSyn, &[Counter::FlowNew]),
            new.backend("its SYN-ACK finds its entry", L4::TcpAck),
        ],
    );
}

#[test]
fn a_closed_flow_never_proves_its_reply_entry_again() {
    if !require_root("a_closed_flow_never_proves_its_reply_entry_again") {
        return;
    }
    let (ns, mut dp, vips) = setup();
    let _inside = ns.enter();
    let c = &connections_in_one_reply_set(&dp, &vips, 1)[0];
    let mut cases = c.opens();
    cases.push(c.client("client FIN", L4::TcpFin, &[Counter::FlowHit]));
    run_all(&mut dp, cases);
    evict_reply_entry(&mut dp, &c.reply_key());
    // Late client packets (the ACK of the backend's FIN, retransmissions), each the first of
    // its reply-check period: the first writes the reply entry again, unproven as its closed
    // forward entry; the next finds it there and must leave it unproven, or it would protect
    // its way until idle.
    next_reply_check_period(&mut dp, &c.forward_key());
    run_all(
        &mut dp,
        vec![c.client("late ACK: reply entry written", L4::TcpAck, &[Counter::FlowHit, Counter::ReverseRestored])],
    );
    next_reply_check_period(&mut dp, &c.forward_key());
    let mut found = c.client("later ACK: reply entry found", L4::TcpAck, &[Counter::FlowHit]);
    found.unchanged = vec![Counter::ReverseRestored];
    run_all(&mut dp, vec![found]);
    let reply = stamp::<lb_common::flow::ReverseEntry>(&mut dp, map_names::REVERSE_FLOWS, &c.reply_key());
    assert_eq!(life(reply), Some(0), "the reply entry of a closed flow is unproven");
}

#[test]
fn live_proven_reply_entries_are_kept_until_idle() {
    if !require_root("live_proven_reply_entries_are_kept_until_idle") {
        return;
    }
    let (ns, mut dp, vips) = setup();
    let _inside = ns.enter();
    let conns = connections_in_one_reply_set(&dp, &vips, FLOW_WAYS + 1);
    let mut cases: Vec<Case> = conns[..FLOW_WAYS].iter().flat_map(|c| c.opens()).collect();
    let new = &conns[FLOW_WAYS];
    cases.push(new.client("a 5th SYN, its reply set full of live proven entries", L4::TcpSyn, &[Counter::FlowNew]));
    cases.push(new.backend_dropped("its SYN-ACK: no entry (the live ones keep theirs), backend of two VIPs"));
    run_all(&mut dp, cases);
    for c in &conns[..FLOW_WAYS] {
        let reply = stamp::<lb_common::flow::ReverseEntry>(&mut dp, map_names::REVERSE_FLOWS, &c.reply_key());
        assert_eq!(life(reply), Some(PROVEN), "live reply entry of port {}", c.port);
    }
    // The four fall silent for the idle limit: the client's SYN, sent again, finds a way.
    age_reply_ways(&mut dp, &new.reply_key(), PROTECT_IDLE_TICKS, |_| true);
    run_all(
        &mut dp,
        vec![
            new.client("the SYN again, the other four idle past the limit", L4::TcpSyn, &[Counter::FlowNew]),
            new.backend("its SYN-ACK finds its entry", L4::TcpAck),
        ],
    );
}

/// Under a SYN flood a new connection's reply entry waits for its SYN-ACK among entries of
/// flood SYNs the backend has already answered: those give way first, even when the
/// newcomer's is the oldest.
#[test]
fn answered_reply_entries_give_way_before_waiting_ones() {
    if !require_root("answered_reply_entries_give_way_before_waiting_ones") {
        return;
    }
    let (ns, mut dp, vips) = setup();
    let _inside = ns.enter();
    let conns = connections_in_one_reply_set(&dp, &vips, FLOW_WAYS + 1);
    let (waiting, flood) = (&conns[0], &conns[1..]);
    run_all(&mut dp, vec![waiting.client("a client's SYN", L4::TcpSyn, &[Counter::FlowNew])]);
    let waiting_key = waiting.reply_key();
    age_reply_ways(&mut dp, &waiting_key, 64, |k| *k == waiting_key);
    let mut cases = Vec::new();
    for c in &flood[..FLOW_WAYS - 1] {
        cases.push(c.client("a flood SYN", L4::TcpSyn, &[Counter::FlowNew]));
        cases.push(c.backend("answered by the backend", L4::TcpAck));
    }
    cases.push(flood[FLOW_WAYS - 1].client("one more flood SYN in the full set", L4::TcpSyn, &[Counter::FlowNew]));
    cases.push(waiting.backend("the client's SYN-ACK still finds its entry", L4::TcpAck));
    run_all(&mut dp, cases);
}

/// CLOCK_MONOTONIC, the clock the program's budget windows (2^30 ns) are cut from.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn past_the_new_flow_budget_flows_are_placed_unrecorded() {
    if !require_root("past_the_new_flow_budget_flows_are_placed_unrecorded") {
        return;
    }
    let (ns, mut dp, vips) = setup();
    let _inside = ns.enter();
    // The budget is per CPU: every run on the same one.
    // SAFETY: a zeroed cpu_set_t with one CPU set, for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set), 0, "pinning to CPU 0");
    }
    dp.set_config(DataplaneConfig {
        ring_size: RING,
        hash_seed: SEED,
        nexthop_generation: 1,
        new_flow_budget: 2,
        ..Default::default()
    })
    .unwrap();
    let b = by_hash(&vips[0], client_hash(&ipv4_bytes(CLIENT), SEED));
    let syn = |port: u16| {
        let f = Frame::tcp(CLIENT, port, WEB, 80);
        case("SYN", f.bytes(), XDP_TX, Some(nat_out(&f, (CLIENT, port), b, LB_MAC, mac_of(b.0))), Counter::ForwardTx)
    };
    // All three inside one budget window: start early in one.
    while monotonic_ns() & ((1 << 30) - 1) > 600_000_000 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let third = with_events(syn(44002), &[Counter::FlowUnrecorded]);
    // Past the budget the reply entry is written all the same: the backend serves two VIPs,
    // so without it the SYN-ACK would have no VIP to come from.
    let third_reply = Connection { port: 44002, b }.backend("its SYN-ACK, back from the VIP", L4::TcpAck);
    run_all(
        &mut dp,
        vec![
            with_events(syn(44000), &[Counter::FlowNew]),
            with_events(syn(44001), &[Counter::FlowNew]),
            third,
            third_reply,
        ],
    );
    let recorded = |port: u16| dp.lookup_flow(&flow_key(CLIENT, WEB, port, 80)).unwrap().is_some();
    assert_eq!([recorded(44000), recorded(44001), recorded(44002)], [true, true, false]);
    // The next window gives a new budget (the program reads the clock again at its first new
    // flow of a later kernel tick).
    let window = monotonic_ns() >> 30;
    while monotonic_ns() >> 30 == window {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    run_all(&mut dp, vec![with_events(syn(44003), &[Counter::FlowNew])]);
    assert!(
        dp.lookup_flow(&flow_key(CLIENT, WEB, 44003, 80)).unwrap().is_some(),
        "a new window's first flow is recorded"
    );
}

#[test]
fn a_reused_backend_id_never_matches_an_old_flow() {
    if !require_root("a_reused_backend_id_never_matches_an_old_flow") {
        return;
    }
    let (ns, mut dp, vips) = setup();
    let _inside = ns.enter();
    let web = &vips[0];
    let b = by_hash(web, client_hash(&ipv4_bytes(CLIENT), SEED));
    let (old_id, _, _) = *web.backends.iter().find(|(_, a, p)| (*a, *p) == b).unwrap();
    let (other_id, oa, op) = *web.backends.iter().find(|(id, _, _)| *id != old_id).unwrap();
    let syn = Frame::tcp(CLIENT, 40000, WEB, 80);
    let ack = syn.with(|f| f.l4 = L4::TcpAck);
    run_all(
        &mut dp,
        vec![with_events(
            case(
                "flow placed on its backend",
                syn.bytes(),
                XDP_TX,
                Some(nat_out(&syn, (CLIENT, 40000), b, LB_MAC, mac_of(b.0))),
                Counter::ForwardTx,
            ),
            &[Counter::FlowNew],
        )],
    );
    assert!(dp.backend_traffic(old_id).unwrap().packets > 0);
    // The backend goes; later its id is given to a backend of another VIP (here B2:9090).
    dp.write_ring(0, &vec![other_id; RING as usize]).unwrap();
    dp.remove_backend(old_id).unwrap();
    let newcomer = Backend {
        addr: ipv4_bytes(B2),
        port: 9090u16.to_be(),
        family: family::IPV4,
        flags: BACKEND_ACTIVE,
        generation: 0,
    };
    dp.upsert_backend(old_id, newcomer).unwrap();
    assert_eq!(dp.backend_traffic(old_id).unwrap().packets, 0, "a new holder's counters start at zero");
    assert_eq!(
        dp.lookup_flow(&flow_key(CLIENT, WEB, 40000, 80)).unwrap(),
        None,
        "explain must not follow the old entry either"
    );
    run_all(
        &mut dp,
        vec![with_events(
            case(
                "the old flow's next packet: placed again by its VIP's ring, not sent to the id's new holder",
                ack.bytes(),
                XDP_TX,
                Some(nat_out(&ack, (CLIENT, 40000), (oa, op), LB_MAC, mac_of(oa))),
                Counter::ForwardTx,
            ),
            &[Counter::FlowRerouted],
        )],
    );
    // The same backend written again (a reload) keeps its generation: its flows still match.
    let entry = dp.lookup_flow(&flow_key(CLIENT, WEB, 40000, 80)).unwrap().expect("re-placed flow recorded");
    let same =
        Backend { addr: ipv4_bytes(oa), port: op.to_be(), family: family::IPV4, flags: BACKEND_ACTIVE, generation: 0 };
    dp.upsert_backend(other_id, same).unwrap();
    assert_eq!(dp.lookup_flow(&flow_key(CLIENT, WEB, 40000, 80)).unwrap(), Some(entry));
}
