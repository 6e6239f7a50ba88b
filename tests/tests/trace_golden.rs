//! `lb-ctl trace` in the program: golden packets run through the real lb_ingress with
//! BPF_PROG_TEST_RUN while filters are set in TRACE, and the records read back from
//! TRACE_EVENTS. Each record must say what the golden cases of the same packets expect (the
//! verdict and its counter, the decision counted on the way, the VIP, the backend the ring
//! alternates to, the rewritten packet); packets no filter matches, and every packet while no
//! filter is set, leave no record; past the per-CPU budget, matches are counted, not recorded.
//! Needs root.
use aya::maps::{MapData, RingBuf};
use aya::programs::Xdp;
use lb_common::hash::client_hash;
use lb_common::stats::Counter;
use lb_common::trace::{TRACE_NONE, TraceControl, TraceFilter, TraceRecord, trace_kind, trace_stats};
use lb_common::{family, ipv4_bytes, program_names};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::load::program;
use lb_tests::fixture::*;
use lb_tests::netns::ifindex;
use lb_tests::packets::{Frame, L4};
use lb_tests::privileges::require_root;
use lb_tests::testrun::pin_to_this_cpu;
use lb_tests::testrun::run_xdp;

const VIP_WEB: [u8; 4] = [203, 0, 113, 10];
/// The fixture's NAT VIP without backends.
const VIP_EMPTY: [u8; 4] = [203, 0, 113, 30];

fn records(events: &mut RingBuf<MapData>) -> Vec<TraceRecord> {
    let mut out = Vec::new();
    while let Some(item) = events.next() {
        assert_eq!(item.len(), size_of::<TraceRecord>(), "a whole record");
        // SAFETY: the program writes whole TraceRecords (plain old data).
        out.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) });
    }
    out
}

fn counted(r: &TraceRecord, c: Counter) -> bool {
    r.counted & (1 << c as u32) != 0
}

fn client_filter(client: [u8; 4]) -> TraceFilter {
    TraceFilter {
        client: ipv4_bytes(client),
        client_mask: ipv4_bytes([255; 4]),
        client_family: family::IPV4,
        ..TraceFilter::ANY
    }
}

fn control(filters: &[TraceFilter], budget: u32) -> TraceControl {
    let mut c = TraceControl { budget, ..TraceControl::default() };
    for (i, f) in filters.iter().enumerate() {
        c.filters[i] = *f;
        c.active |= 1 << i;
    }
    c
}

#[test]
fn trace_records_what_the_golden_cases_expect() {
    if !require_root("trace_records_what_the_golden_cases_expect") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    // One CPU: the budget is per CPU.
    pin_to_this_cpu().unwrap();
    let mut dp = balancer();
    let vips = vips();
    configure(&mut dp, &vips);
    let g0 = ifindex("g0");
    let mut maps = dp.take_trace().expect("the balancer has trace maps");
    let stat = |maps: &lb_ctl::dataplane::TraceMaps, i: u32| -> u64 { maps.stats.get(&i, 0).unwrap().iter().sum() };
    let prog: *const Xdp = program(dp.ebpf_mut(), program_names::INGRESS).unwrap();
    // SAFETY: the program lives in dp's object, which outlives every use here.
    let run = |frame: &Frame| run_xdp(unsafe { &*prog }, &frame.bytes(), g0);

    let web = &vips[0];
    let b = by_hash(web, client_hash(&ipv4_bytes(CLIENT), SEED));
    let b_id = web.backends.iter().find(|(_, a, p)| (*a, *p) == b).unwrap().0;
    let slot = client_hash(&ipv4_bytes(CLIENT), SEED) % RING;

    // Off: no record, whatever the packet.
    run(&Frame::tcp(CLIENT, 41000, VIP_WEB, 80));
    assert!(records(&mut maps.events).is_empty(), "tracing off records nothing");

    dp.set_trace(&control(&[client_filter(CLIENT)], 1000)).unwrap();
    let syn = Frame::tcp(CLIENT, 40000, VIP_WEB, 80);
    let ack = syn.with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = b"GET / HTTP/1.1\r\n\r\n".to_vec()
    });
    let reply = Frame::tcp(b.0, b.1, CLIENT, 40000).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(b.0)
    });
    for frame in [&syn, &ack, &reply, &Frame::tcp(CLIENT, 40001, VIP_EMPTY, 80)] {
        run(frame);
    }
    // Not matched: another client, and a packet for no VIP.
    run(&Frame::tcp(CLIENT2, 40000, VIP_WEB, 80));
    run(&Frame::tcp(CLIENT, 40000, [192, 0, 2, 1], 22));
    let got = records(&mut maps.events);
    assert_eq!(got.len(), 4, "one record per matching packet: {got:#?}");
    let [new, hit, answer, dropped] = [&got[0], &got[1], &got[2], &got[3]];

    // "new TCP flow (SYN), NAT: rewritten to its backend, XDP_TX", event flow_new.
    assert_eq!((new.kind, new.action, new.reason), (trace_kind::VIP, 3, Counter::ForwardTx as u32));
    assert!(counted(new, Counter::FlowNew) && !counted(new, Counter::FlowHit), "{new:#?}");
    assert_eq!((new.vip_id, new.backend_id, new.ring_slot, new.tcp_flags), (0, b_id, slot, 0x02));
    assert_eq!(new.key.src, ipv4_bytes(CLIENT));
    assert_eq!((u16::from_be(new.key.src_port), u16::from_be(new.key.dst_port)), (40000, 80));
    assert_eq!(&new.packet[..6], &mac_of(b.0), "the next hop's MAC");
    assert_eq!(&new.packet[30..34], &b.0, "NAT: the destination is the backend");
    assert_eq!(new.matched, 1);
    // "established TCP flow (ACK + data): same backend", event flow_hit.
    assert!(counted(hit, Counter::FlowHit) && !counted(hit, Counter::FlowNew), "{hit:#?}");
    assert_eq!((hit.action, hit.backend_id, hit.tcp_flags & 0x12), (3, b_id, 0x10));
    // "NAT reply from the backend: source back to the VIP, XDP_TX", event nat_reply.
    assert_eq!((answer.kind, answer.action, answer.vip_id, answer.backend_id), (trace_kind::REPLY, 3, 0, TRACE_NONE));
    assert!(counted(answer, Counter::NatReply), "{answer:#?}");
    assert_eq!(&answer.packet[26..30], &VIP_WEB, "the reply leaves from the VIP");
    assert_eq!(&answer.packet[..6], &CLIENT_MAC);
    // A VIP without backends: dropped, drop_no_backend, no backend.
    assert_eq!((dropped.action, dropped.reason, dropped.backend_id), (1, Counter::DropNoBackend as u32, TRACE_NONE));

    // A verdict filter: drops only.
    dp.set_trace(&control(&[TraceFilter { actions: 1 << 1, ..TraceFilter::ANY }], 1000)).unwrap();
    run(&ack);
    run(&Frame::tcp(CLIENT2, 40002, VIP_EMPTY, 80));
    let got = records(&mut maps.events);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].reason, Counter::DropNoBackend as u32);

    // Two traces: each record names the filters it matched.
    let by_backend = TraceFilter { backend_id: b_id, ..TraceFilter::ANY };
    dp.set_trace(&control(&[client_filter(CLIENT2), by_backend], 1000)).unwrap();
    run(&ack);
    let got = records(&mut maps.events);
    assert_eq!(got.iter().map(|r| r.matched).collect::<Vec<_>>(), vec![0b10], "{got:#?}");

    // The budget: 2 records a window on this CPU; six matching packets. (The records above
    // may have spent this window's already, and a window may turn over between two packets:
    // at most 4 are recorded either way.)
    let (recorded, over) = (stat(&maps, trace_stats::RECORDED), stat(&maps, trace_stats::OVER_BUDGET));
    dp.set_trace(&control(&[TraceFilter::ANY], 2)).unwrap();
    for _ in 0..6 {
        run(&ack);
    }
    let shown = records(&mut maps.events).len() as u64;
    let over = stat(&maps, trace_stats::OVER_BUDGET) - over;
    assert_eq!(stat(&maps, trace_stats::RECORDED) - recorded, shown);
    assert_eq!(shown + over, 6, "every match recorded or counted over budget");
    assert!(shown <= 4 && over >= 2, "{shown} recorded, {over} over budget");

    // Off again: nothing.
    dp.set_trace(&TraceControl::default()).unwrap();
    run(&ack);
    assert!(records(&mut maps.events).is_empty(), "tracing off again records nothing");
}
