//! Golden packets: a table of frames run through the real lb_ingress program (and lb_decap)
//! with BPF_PROG_TEST_RUN and real maps, written by the real map writer. Each case states the
//! verdict, the exact output bytes (built independently with etherparse, checksums included)
//! and the counters that must move. Needs root; the FIB lookups resolve in a namespace this
//! test creates, with static neighbours so MAC addresses are known.

use aya::programs::Xdp;
use lb_common::config::DataplaneConfig;
use lb_common::flow::FLOW_WAYS;
use lb_common::flow::SharedFlow;
use lb_common::hash::{client_hash, flow_hash};
use lb_common::stats::{Counter, DecapCounter};
use lb_common::{ip_proto, ipv4_bytes, program_names};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_ctl::dataplane::load::{allow_decap_sources, load_decap, program};
use lb_tests::fixture::*;
use lb_tests::golden::*;
use lb_tests::netns::ifindex;
use lb_tests::packets::{Frame, L4, gue_frame, ipip};
use lb_tests::privileges::require_root;
use lb_tests::testrun::{RunResult, action_name, run_xdp};

mod golden;

#[test]
fn golden_packets_through_lb_ingress() {
    if !require_root("golden_packets_through_lb_ingress") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let mut g = Golden { dp: balancer(), ingress: ifindex("g0"), results: Vec::new() };
    let vips = vips();

    golden::non_vip::before_configuration(&mut g, &vips);
    configure(&mut g.dp, &vips);
    golden::non_vip::not_for_a_vip(&mut g);
    golden::reply::from_nat_backend_ports(&mut g, &vips);
    golden::non_vip::malformed(&mut g);
    golden::non_vip::not_decided_by_the_first_check(&mut g);
    golden::nat::tcp(&mut g, &vips);
    golden::nat::flow_hash_and_reused_tuple(&mut g, &vips);
    golden::nat::udp(&mut g, &vips);
    golden::icmp_to_client::errors_to_clients(&mut g, &vips);
    golden::dsr::ip_in_ip(&mut g, &vips);
    golden::dsr::gue(&mut g, &vips);
    golden::dsr::by_mac(&mut g, &vips);
    golden::next_hop::next_hop(&mut g, &vips);
    golden::nat::backend_changes(&mut g, &vips);
    golden::next_hop::cache(&mut g, &vips, &ns);

    // Per-VIP and per-backend traffic were counted.
    let t = g.dp.vip_traffic(2).unwrap();
    assert_eq!(t.packets, 6, "DSR VIP forwarded 5 packets and an ICMP error");
    assert_eq!(g.dp.backend_traffic(4).unwrap().packets, 6, "DSR backend got 6 packets");

    let counted = counters(&g.dp);
    let missing: Vec<&str> = Counter::ALL
        .iter()
        .filter(|c| is_verdict(**c) && !UNREACHABLE_HERE.contains(c) && counted[c] == 0)
        .map(|c| c.name())
        .collect();
    assert!(missing.is_empty(), "verdicts no golden case exercised: {missing:?}");

    let failed = g.failures();
    println!("{} golden cases, {} failed", g.results.len(), failed.len());
    assert!(g.results.len() >= 25);
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
}

/// The connection table, on a balancer of its own (its random table seed must not put the
/// flows of other cases in the set under test): a full set gives its least recently used way
/// to a new flow.
#[test]
fn connection_table_set_evicts_its_least_recently_used_flow() {
    if !require_root("connection_table_set_evicts_its_least_recently_used_flow") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let mut g = Golden { dp: balancer(), ingress: ifindex("g0"), results: Vec::new() };
    let vips = vips();
    configure(&mut g.dp, &vips);
    let flow_vip = &vips[8];
    let flow_addr = flow_vip.addr;
    let pick = |port: u16| {
        by_hash(
            flow_vip,
            flow_hash(&ipv4_bytes(CLIENT), &ipv4_bytes(flow_addr), port.to_be(), 80u16.to_be(), ip_proto::TCP, SEED),
        )
    };
    let set_of = |port: u16| g.dp.flow_set_of(&flow_key(CLIENT, flow_addr, port, 80));
    let same_set = ports_in_one_set(set_of, FLOW_WAYS + 1);
    let nat_flow = |port: u16, l4: L4| {
        let f = Frame::tcp(CLIENT, port, flow_addr, 80).with(|f| f.l4 = l4);
        let out = nat_out(&f, (CLIENT, port), pick(port), LB_MAC, mac_of(pick(port).0));
        (f, out)
    };
    // Ways are stamped with the kernel tick (jiffies): 25 ms is several ticks at any HZ >= 100.
    let tick = || std::thread::sleep(std::time::Duration::from_millis(25));
    for (i, &port) in same_set[..FLOW_WAYS].iter().enumerate() {
        let (f, out) = nat_flow(port, L4::TcpSyn);
        let mut c = case(
            [
                "table: 1st flow of a set",
                "table: 2nd flow of the set",
                "table: 3rd flow of the set",
                "table: 4th flow, the set is full",
            ][i],
            f.bytes(),
            XDP_TX,
            Some(out),
            Counter::ForwardTx,
        );
        c.events = vec![Counter::FlowNew];
        g.run(c);
        tick();
    }
    let (f, out) = nat_flow(same_set[0], L4::TcpAck);
    let mut c =
        case("table: the 1st flow sends again (now the most recent)", f.bytes(), XDP_TX, Some(out), Counter::ForwardTx);
    c.events = vec![Counter::FlowHit];
    g.run(c);
    tick();
    let (f, out) = nat_flow(same_set[FLOW_WAYS], L4::TcpSyn);
    let mut c = case(
        "table: a 5th flow evicts the least recently used (2nd)",
        f.bytes(),
        XDP_TX,
        Some(out),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowTableFull];
    g.run(c);
    let failed = g.failures();
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
    let recorded = |port: u16| g.dp.lookup_flow(&flow_key(CLIENT, flow_addr, port, 80)).unwrap().is_some();
    let kept: Vec<bool> = same_set.iter().map(|p| recorded(*p)).collect();
    assert_eq!(kept, [true, false, true, true, true], "ways after the eviction, ports {same_set:?}");
}

#[test]
fn golden_packets_through_lb_decap() {
    if !require_root("golden_packets_through_lb_decap") {
        return;
    }
    let mut ebpf = load_decap().unwrap();
    allow_decap_sources(&mut ebpf, &["198.51.100.0/28".parse().unwrap()]).unwrap();
    let inner = Frame::tcp(CLIENT, 40000, [203, 0, 113, 20], 80).with(|f| f.payload = b"hello".to_vec());
    let wrapped = ipip(&inner, LB_ADDR, B1, LB_MAC, mac_of(B1));
    // After decapsulation: the backend's frame addresses, the client's datagram.
    let mut want = wrapped[..12].to_vec();
    want.extend_from_slice(&[0x08, 0x00]);
    want.extend_from_slice(&inner.bytes()[14..]);
    let tagged = inner.with(|f| f.vlan = Some(7));
    let wrapped_tagged = ipip(&tagged, LB_ADDR, B1, LB_MAC, mac_of(B1));
    let mut want_tagged = wrapped_tagged[..18].to_vec();
    want_tagged.extend_from_slice(&tagged.bytes()[18..]);
    let stranger = ipip(&inner, [198, 51, 100, 77], B1, LB_MAC, mac_of(B1));
    let gue =
        |f: &Frame, from: [u8; 4], port| gue_frame(&f.bytes(), f.l3_offset(), (from, B1), port, LB_MAC, mac_of(B1));
    let gue_wrapped = gue(&inner, LB_ADDR, 50000);
    let gue_tagged = gue(&tagged, LB_ADDR, 50000);
    let gue_stranger = gue(&inner, [198, 51, 100, 77], 50000);
    // UDP to another port from an allowed source: not ours to open.
    let mut other_port = gue_wrapped.clone();
    other_port[36..38].copy_from_slice(&6081u16.to_be_bytes());
    let (want_gue, want_gue_tagged) = (want.clone(), want_tagged.clone());
    let mut short = wrapped[..14 + 20 + 8].to_vec();
    short[16..18].copy_from_slice(&28u16.to_be_bytes());

    let cases: Vec<DecapCase> = vec![
        ("IPIP: outer header removed", wrapped.clone(), want, DecapCounter::Decapsulated),
        ("802.1Q IPIP: outer header removed, tag kept", wrapped_tagged, want_tagged, DecapCounter::Decapsulated),
        ("plain TCP: untouched", inner.bytes(), inner.bytes(), DecapCounter::Passed),
        ("IPIP too short for an inner header: untouched", short.clone(), short, DecapCounter::Malformed),
        ("IPIP from outside the allowed sources: untouched", stranger.clone(), stranger, DecapCounter::Refused),
        ("GUE: outer IPv4 and UDP headers removed", gue_wrapped, want_gue, DecapCounter::Decapsulated),
        ("802.1Q GUE: outer headers removed, tag kept", gue_tagged, want_gue_tagged, DecapCounter::Decapsulated),
        ("GUE from outside the allowed sources: untouched", gue_stranger.clone(), gue_stranger, DecapCounter::Refused),
        ("UDP to another port: untouched", other_port.clone(), other_port, DecapCounter::Passed),
    ];
    run_decap_cases(&mut ebpf, &cases);
}

/// Flow sharing: with `share_flows` on, each flow the program records is reported on
/// FLOW_EVENTS (key, backend id, VIP id), and a flow recorded from a peer
/// (`record_shared_flows`) is followed even where this node's ring would choose otherwise.
#[test]
fn flows_are_reported_for_sharing_and_shared_flows_are_followed() {
    if !require_root("flows_are_reported_for_sharing_and_shared_flows_are_followed") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let g0 = ifindex("g0");
    let mut dp = balancer();
    let vips = vips();
    configure(&mut dp, &vips);
    let two = &vips[12];
    let mut events = dp.take_flow_events().expect("FLOW_EVENTS");
    let ingress = |dp: &mut AyaDataplane, frame: &Frame| {
        let prog: &Xdp = program(dp.ebpf_mut(), program_names::INGRESS).unwrap();
        run_xdp(prog, &frame.bytes(), g0)
    };

    // Off (the default): nothing reported.
    ingress(&mut dp, &Frame::tcp(CLIENT, 41000, two.addr, 80));
    assert!(events.next().is_none(), "no events while sharing is off");
    let on = DataplaneConfig {
        ring_size: RING,
        hash_seed: SEED,
        nexthop_generation: 1,
        share_flows: 1,
        ..Default::default()
    };
    dp.set_config(on).unwrap();
    let syn = Frame::tcp(CLIENT, 41001, two.addr, 80);
    assert_eq!(ingress(&mut dp, &syn).action, XDP_TX);
    let item = events.next().expect("the recorded flow is reported");
    // SAFETY: the program writes whole SharedFlow records.
    let event: SharedFlow = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
    drop(item);
    let chosen = by_hash(two, client_hash(&ipv4_bytes(CLIENT), SEED)).0;
    let chosen_id = if chosen == B1 { 14 } else { 15 };
    assert_eq!(event, SharedFlow { key: flow_key(CLIENT, two.addr, 41001, 80), backend_id: chosen_id, vip_id: 12 });
    // An established packet of a known flow records nothing new.
    ingress(&mut dp, &syn.with(|f| f.l4 = L4::TcpAck));
    assert!(events.next().is_none(), "only recorded flows are reported");

    // A peer placed this client's flow on the other backend: the entry wins over the ring.
    let (other, other_id) = if chosen == B1 { (B2, 15) } else { (B1, 14) };
    let shared = SharedFlow { key: flow_key(CLIENT, two.addr, 41002, 80), backend_id: other_id, vip_id: 12 };
    assert_eq!(dp.record_shared_flows(&[shared]).unwrap(), 1);
    assert_eq!(dp.record_shared_flows(&[shared]).unwrap(), 0, "a flow the table holds keeps its entry");
    let ack = Frame::tcp(CLIENT, 41002, two.addr, 80).with(|f| f.l4 = L4::TcpAck);
    let r = ingress(&mut dp, &ack);
    assert_eq!(r.action, XDP_TX);
    assert_eq!(r.output, ipip(&ack, LB_ADDR, other, LB_MAC, mac_of(other)), "sent to the shared flow's backend");
    assert!(events.next().is_none(), "a shared flow is not reported again (no echo between peers)");
}

/// Mutated frames (a fixed-seed generator: truncations, flipped bytes, random lengths, based
/// on every kind of valid frame above) never abort, are always counted under exactly one
/// verdict, and whatever is passed to the stack without being a rewritten VIP packet is
/// passed byte for byte as it came.
#[test]
fn mutated_frames_get_a_defined_counted_verdict() {
    if !require_root("mutated_frames_get_a_defined_counted_verdict") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let g0 = ifindex("g0");
    let mut dp = balancer();
    let vips = vips();
    configure(&mut dp, &vips);
    let web = vips[0].addr;
    let seeds: Vec<Vec<u8>> = vec![
        Frame::tcp(CLIENT, 40000, web, 80).bytes(),
        Frame::tcp(CLIENT, 40000, web, 80).with(|f| f.vlan = Some(9)).bytes(),
        Frame::udp(CLIENT, 5000, web, 53).bytes(),
        Frame::tcp(CLIENT, 42000, vips[2].addr, 80).bytes(),
        Frame::tcp(B1, 8080, CLIENT, 40000).with(|f| f.l4 = L4::TcpAck).bytes(),
        Frame::tcp(CLIENT, 40000, [192, 0, 2, 1], 22).bytes(),
    ];
    // xorshift64*: deterministic, so a failure reproduces.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let prog = program(dp.ebpf_mut(), program_names::INGRESS).unwrap() as *const Xdp;
    let mut by_action = [0u32; 5];
    for round in 0..3000 {
        let mut frame = seeds[round % seeds.len()].clone();
        match next() % 4 {
            0 => frame.truncate(14 + (next() as usize % (frame.len() - 13))),
            1 => {
                for _ in 0..1 + next() % 4 {
                    let at = 12 + next() as usize % (frame.len() - 12);
                    frame[at] ^= 1 << (next() % 8);
                }
            }
            2 => frame.extend((0..next() % 64).map(|_| next() as u8)),
            _ => {
                let at = 14 + next() as usize % 24;
                if at < frame.len() {
                    frame[at] = next() as u8;
                }
            }
        }
        let before = counters(&dp);
        // SAFETY: the program lives in dp, which outlives this loop and is not moved.
        let RunResult { action, output } = run_xdp(unsafe { &*prog }, &frame, g0);
        let after = counters(&dp);
        assert!(
            (1..=4).contains(&action),
            "round {round}: verdict {action} ({}) for {}",
            action_name(action),
            hex(&frame)
        );
        by_action[action as usize] += 1;
        let moved: Vec<Counter> =
            Counter::ALL.iter().copied().filter(|c| is_verdict(*c) && after[c] != before[c]).collect();
        assert_eq!(moved.len(), 1, "round {round}: verdict counters moved: {moved:?} for {}", hex(&frame));
        let rewritten_to_stack = moved[0] == Counter::PassNoNeighbour;
        if action == XDP_PASS && !rewritten_to_stack {
            assert_eq!(output, frame, "round {round}: passed frame altered ({:?})", moved[0]);
        }
    }
    println!(
        "3000 mutated frames: drop {}, pass {}, tx {}, redirect {}",
        by_action[1], by_action[2], by_action[3], by_action[4]
    );
}

/// COUNTERS pinned by an older build (an upgrade's restart keeps the pinned maps) holds fewer
/// counters than this build names: reading them must still work, the newer ones as 0.
#[test]
fn counters_of_an_older_pinned_map_read_as_zero() {
    if !require_root("counters_of_an_older_pinned_map_read_as_zero") {
        return;
    }
    let older = Counter::COUNT - 1;
    let ebpf = aya::EbpfLoader::new()
        .map_max_entries(lb_common::map_names::COUNTERS, older)
        .load(lb_ctl::dataplane::objects::INGRESS)
        .unwrap();
    let dp = AyaDataplane::new(ebpf, RING);
    let counters = dp.counters().expect("counters of a smaller map");
    assert_eq!(counters.len(), Counter::ALL.len());
    assert!(counters.iter().all(|(_, n)| *n == 0), "{counters:?}");
    let per_cpu = dp.counters_per_cpu().expect("per-CPU counters of a smaller map");
    assert!(per_cpu.iter().all(|cpu| cpu.len() == Counter::ALL.len()), "{per_cpu:?}");
}

/// VIP_INDEX, on a balancer of its own: a VIP the index names, one whose slot it shares with
/// another VIP (found through VIPS), a stale slot, and a non-VIP address on a VIP's port whose
/// slot names a VIP: each gets the verdict and the bytes it would get without the index.
#[test]
fn new_flows_find_their_vip_through_the_index_or_vips() {
    use aya::maps::Array;
    use lb_common::vip::index;
    if !require_root("new_flows_find_their_vip_through_the_index_or_vips") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let mut g = Golden { dp: balancer(), ingress: ifindex("g0"), results: Vec::new() };
    let mut vips = vips();
    let web_key = vip_key(&vips[0]);
    let web_slot = index::slot(&web_key);
    // Documentation addresses that are no VIP of the fixture.
    let taken: Vec<[u8; 4]> = vips.iter().map(|v| v.addr).collect();
    let free = || {
        [[192, 0, 2], [198, 51, 100], [203, 0, 113]]
            .into_iter()
            .flat_map(|net| (1..=254).map(move |n| [net[0], net[1], net[2], n]))
            .filter(|a| !taken.contains(a))
    };
    let slot_of = |addr: [u8; 4], port: u16| index::slot(&vip_key(&twin(addr, port)));
    // A second VIP whose key hashes to the web VIP's slot, and an address on a VIP port that
    // is no VIP and hashes there too.
    let (twin_addr, twin_port) =
        (1000..=u16::MAX).find_map(|port| free().find(|a| slot_of(*a, port) == web_slot).map(|a| (a, port))).unwrap();
    let stranger = free().find(|a| *a != twin_addr && slot_of(*a, 80) == web_slot).map(|a| (a, 80));
    let stranger = stranger
        .or_else(|| free().find(|a| *a != twin_addr && slot_of(*a, twin_port) == web_slot).map(|a| (a, twin_port)))
        .expect("an address on port 80 or the twin's port that hashes to the web VIP's slot");
    let twin_id = vips.len();
    vips.push(twin(twin_addr, twin_port));
    configure(&mut g.dp, &vips);
    let read_slot = |dp: &mut AyaDataplane| {
        let map = dp.ebpf_mut().map_mut(lb_common::map_names::VIP_INDEX).unwrap();
        Array::<_, u32>::try_from(map).unwrap().get(&web_slot, 0).unwrap()
    };
    let web = (golden::VIP_WEB, 80);
    let web_backend = by_hash(&vips[0], client_hash(&ipv4_bytes(CLIENT), SEED));
    let syn = |(addr, port): ([u8; 4], u16), src_port: u16, backend: ([u8; 4], u16), name: &'static str| {
        let f = Frame::tcp(CLIENT, src_port, addr, port);
        let out = nat_out(&f, (CLIENT, src_port), backend, LB_MAC, mac_of(backend.0));
        let mut c = case(name, f.bytes(), XDP_TX, Some(out), Counter::ForwardTx);
        c.events = vec![Counter::FlowNew];
        c
    };
    let passed = |(addr, port): ([u8; 4], u16), name: &'static str| {
        case(name, Frame::tcp(CLIENT, 41000, addr, port).bytes(), XDP_PASS, None, Counter::PassNotVip)
    };

    assert_eq!(read_slot(&mut g.dp), index::NONE, "a slot two VIPs hash to names neither");
    g.run(syn(web, 41000, web_backend, "index: a shared slot, the VIP found through VIPS"));
    g.run(syn((twin_addr, twin_port), 41000, (B2, 8080), "index: the other VIP of the shared slot"));
    g.run(passed(stranger, "index: a shared slot, an address that is no VIP: passed"));

    g.dp.remove_vip(&vip_key(&vips[twin_id])).unwrap();
    assert_eq!(read_slot(&mut g.dp), 1, "the slot names the VIP left (id 0, written as 1)");
    g.run(syn(web, 41001, web_backend, "index: the slot names the VIP"));
    g.run(passed(stranger, "index: a named slot, an address that is no VIP: passed"));
    g.run(passed((twin_addr, twin_port), "index: the removed VIP's address: passed"));

    // A slot naming another VIP (as while VIP_INFO is being rewritten): VIP_INFO's key
    // disagrees, VIPS answers.
    {
        let map = g.dp.ebpf_mut().map_mut(lb_common::map_names::VIP_INDEX).unwrap();
        Array::<_, u32>::try_from(map).unwrap().set(web_slot, 3, 0).unwrap();
    }
    g.run(syn(web, 41002, web_backend, "index: a stale slot, the VIP found through VIPS"));
    let failed = g.failures();
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
}

/// A NAT VIP on TCP `port` at `addr`, with one backend of its own (id 20: B2, port 8080).
fn twin(addr: [u8; 4], port: u16) -> Vip {
    Vip {
        addr,
        port,
        protocol: ip_proto::TCP,
        forwarding: lb_common::vip::forwarding::NAT,
        hash: lb_common::vip::hash_mode::CLIENT_IP,
        backends: vec![(20, B2, 8080)],
    }
}

/// `bench dataplane --profile` places samples by the program's line table: read from the
/// kernel, it must name a source line for lb_ingress's first instruction and throughout.
#[test]
fn the_profile_line_table_maps_lb_ingress_to_its_source() {
    use lb_tests::bench::line_profile::LineTable;
    if !require_root("the_profile_line_table_maps_lb_ingress_to_its_source") {
        return;
    }
    let mut dp = balancer();
    let table = LineTable::of(program(dp.ebpf_mut(), program_names::INGRESS).unwrap()).unwrap();
    assert!(table.len() > 1000, "{} line records", table.len());
    assert!(table.line_at(0).contains(".rs:"), "entry: {}", table.line_at(0));
    assert!(table.line_at(1 << 12).contains(".rs:"), "{}", table.line_at(1 << 12));
}

/// lb_set_read, the benchmarks' floor (`lb-bench flows`): whatever the frame, it passes it
/// untouched and changes no map: no flow recorded, no counter moved.
#[test]
fn the_floor_program_passes_every_frame_untouched() {
    if !require_root("the_floor_program_passes_every_frame_untouched") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let mut dp = balancer();
    let vips = vips();
    configure(&mut dp, &vips);
    program(dp.ebpf_mut(), program_names::SET_READ).unwrap().load().unwrap();
    let floor: &Xdp = program(dp.ebpf_mut(), program_names::SET_READ).unwrap();
    let (nat_vip, dsr_vip) = (vips[0].addr, vips[2].addr);
    let frames = [
        ("a VIP's UDP packet", Frame::udp(CLIENT, 1000, nat_vip, 53).bytes()),
        ("a VIP's TCP SYN", Frame::tcp(CLIENT, 1000, dsr_vip, 80).bytes()),
        ("a packet for no VIP", Frame::tcp(CLIENT, 1000, [198, 51, 100, 1], 22).bytes()),
        ("a truncated frame", Frame::tcp(CLIENT, 1000, dsr_vip, 80).bytes()[..30].to_vec()),
    ];
    for (name, frame) in &frames {
        let out = run_xdp(floor, frame, ifindex("g0"));
        assert_eq!(action_name(out.action), action_name(XDP_PASS), "{name}");
        assert_eq!(&out.output, frame, "{name}: the frame must pass untouched");
    }
    assert_eq!(dp.lookup_flow(&flow_key(CLIENT, dsr_vip, 1000, 80)).unwrap(), None, "no flow recorded");
    let moved: Vec<_> = dp.counters().unwrap().into_iter().filter(|(_, n)| *n != 0).collect();
    assert!(moved.is_empty(), "counters moved: {moved:?}");
}
