//! Golden packets of QUIC routing by server id (`lb_common::quic`, Katran's encoding): frames
//! run through the real lb_ingress (and lb_ingress_v6) with BPF_PROG_TEST_RUN on maps written
//! through the map writer's operations. Long headers are placed as any UDP; a short header
//! whose connection ID names a backend of the VIP goes there whatever the client's address,
//! in every forwarding mode and both families; unknown, stale, drained, absent or unreadable
//! ids fall back to the connection table and ring. Each case checks the exact output and the
//! counter of its outcome. Needs root.
use std::net::IpAddr;

use lb_common::flow::FlowKey;
use lb_common::hash::client_hash;
use lb_common::quic::{CID_BYTES, CidVersion, QuicServerKey, VIP_QUIC, encode};
use lb_common::stats::Counter;
use lb_common::vip::{VipInfo, forwarding, hash_mode};
use lb_common::{family, ip_bytes, ip_proto, ipv4_bytes};
use lb_ctl::dataplane::Dataplane;
use lb_tests::fixture::{B1, B2, CLIENT, LB_ADDR, LB_MAC, RING, SEED, balancer, mac_of};
use lb_tests::fixture6::*;
use lb_tests::golden::*;
use lb_tests::netns::ifindex;
use lb_tests::packets::{Frame, Frame6, Mac, gue_frame, ipip};
use lb_tests::privileges::require_root;

const PORT: u16 = 443;
const NAT: usize = 0;
const IPIP: usize = 1;
const GUE: usize = 2;
const L2: usize = 3;
const NAT6: usize = 4;
const PLAIN: usize = 5;

/// The QUIC VIPs (by index: NAT, IP in IP, GUE, dsr-l2, NAT66, and a UDP VIP without quic),
/// each with two backends; the CID version each VIP's backends write.
fn quic_vips() -> (Vec<Vip6>, [CidVersion; 6]) {
    let udp = |addr, forwarding, encap_source, backends| Vip6 {
        addr,
        port: PORT,
        protocol: ip_proto::UDP,
        forwarding,
        hash: hash_mode::CLIENT_IP,
        encap_source,
        backends,
    };
    let lb = v4(LB_ADDR);
    let two = |first: u32, port: u16| vec![(first, v4(B1), port), (first + 1, v4(B2), port)];
    let vips = vec![
        udp(v4([203, 0, 113, 80]), forwarding::NAT, lb, two(0, 4433)),
        udp(v4([203, 0, 113, 81]), forwarding::DSR_IPIP, lb, two(2, PORT)),
        udp(v4([203, 0, 113, 82]), forwarding::DSR_GUE, lb, two(4, PORT)),
        udp(v4([203, 0, 113, 83]), forwarding::DSR_L2, lb, two(6, PORT)),
        udp(v6(vip6(0x50)), forwarding::NAT, v6(LB6), vec![(8, v6(B6_1), 4433), (9, v6(B6_2), 4433)]),
        udp(v4([203, 0, 113, 84]), forwarding::NAT, lb, two(10, 4433)),
    ];
    let v = [CidVersion::V1, CidVersion::V2, CidVersion::V3, CidVersion::V1, CidVersion::V2, CidVersion::V1];
    (vips, v)
}

/// The server id of a VIP's `i`th backend: distinct per VIP, and the same numbers on every VIP
/// (ids are per VIP).
fn server_id(i: usize) -> u32 {
    [0x0101, 0x0202][i]
}

/// A server id no backend holds; one whose backend was removed.
const UNKNOWN_ID: u32 = 0x0777;
const STALE_ID: u32 = 0x0303;
const STALE_BACKEND: u32 = 12;

/// A short-header packet's UDP payload: first byte (short header, fixed bit), the connection
/// ID, then protected bytes.
fn short_header(cid: [u8; CID_BYTES]) -> Vec<u8> {
    let mut p = vec![0x41];
    p.extend_from_slice(&cid);
    p.extend_from_slice(b"protected payload");
    p
}

/// A connection ID naming `server_id` in `version` (the free bits as a server would fill them).
fn cid(version: CidVersion, server_id: u32) -> [u8; CID_BYTES] {
    encode(version, server_id, &[0x5a, 0xa5, 0x3c, 0xc3, 0x96, 0x69, 0x0f, 0xf0]).unwrap()
}

/// A client's Initial (long header, version 1) with destination connection ID `dcid`.
fn initial(dcid: [u8; CID_BYTES]) -> Vec<u8> {
    let mut p = vec![0xc3, 0, 0, 0, 1, CID_BYTES as u8];
    p.extend_from_slice(&dcid);
    p.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8, 0]);
    p.resize(1200, 0);
    p
}

fn configure_quic(dp: &mut lb_ctl::dataplane::aya::AyaDataplane, vips: &[Vip6], versions: &[CidVersion]) {
    configure6(dp, vips);
    for (id, v) in vips.iter().enumerate().filter(|(i, _)| *i != PLAIN) {
        let info = VipInfo {
            id: id as u32,
            forwarding: v.forwarding,
            hash: v.hash,
            flags: VIP_QUIC,
            encap_source: ip_bytes(v.encap_source).0,
            ..Default::default()
        };
        dp.upsert_vip(vip_key6(v), info).unwrap();
        for (i, (backend_id, _, _)) in v.backends.iter().enumerate() {
            assert!(server_id(i) <= versions[id].max_server_id());
            dp.set_quic_server(QuicServerKey { vip_id: id as u32, server_id: server_id(i) }, Some(*backend_id))
                .unwrap();
        }
    }
    // The plain VIP's backends declare ids too: its VIP has no quic, so they must not count.
    for (i, (backend_id, _, _)) in vips[PLAIN].backends.iter().enumerate() {
        dp.set_quic_server(QuicServerKey { vip_id: PLAIN as u32, server_id: server_id(i) }, Some(*backend_id)).unwrap();
    }
    // A server id whose backend is gone (removed, not yet cleaned up): must not route.
    let stale = lb_common::backend::Backend {
        addr: ipv4_bytes(B1),
        port: 4434u16.to_be(),
        family: family::IPV4,
        flags: lb_common::backend::BACKEND_ACTIVE,
        generation: 0,
    };
    dp.upsert_backend(STALE_BACKEND, stale).unwrap();
    dp.remove_backend(STALE_BACKEND).unwrap();
    dp.set_quic_server(QuicServerKey { vip_id: NAT as u32, server_id: STALE_ID }, Some(STALE_BACKEND)).unwrap();
}

/// The index of the backend the ring gives `client` (hash = ip, rings alternate).
fn ring_pick(client: &[u8; 16]) -> usize {
    (client_hash(client, SEED) % RING) as usize % 2
}

fn addr4(a: IpAddr) -> [u8; 4] {
    match a {
        IpAddr::V4(v) => v.octets(),
        IpAddr::V6(_) => panic!("an IPv4 fixture address"),
    }
}

/// A client address (192.0.2.N) the ring places on the other backend than `CLIENT`: the
/// client after it moved (NAT rebinding, another network).
fn moved_client() -> [u8; 4] {
    let home = ring_pick(&ipv4_bytes(CLIENT));
    (8..200).map(|n| [192, 0, 2, n]).find(|a| ring_pick(&ipv4_bytes(*a)) != home).unwrap()
}

const QUIC_COUNTERS: [Counter; 5] = [
    Counter::QuicLongHeader,
    Counter::QuicRouted,
    Counter::QuicUnknownServer,
    Counter::QuicNoServerId,
    Counter::QuicTruncated,
];

/// A case whose events are `events` and whose other QUIC counters must not move.
fn quic_case(name: &'static str, input: Vec<u8>, output: Vec<u8>, events: &[Counter]) -> Case {
    let mut c = case(name, input, XDP_TX, Some(output), Counter::ForwardTx);
    c.events = events.to_vec();
    c.unchanged = QUIC_COUNTERS.iter().filter(|q| !events.contains(q)).copied().collect();
    c
}

#[test]
fn quic_golden_packets_through_lb_ingress() {
    if !require_root("quic_golden_packets_through_lb_ingress") {
        return;
    }
    let ns = lab6();
    let _inside = ns.enter();
    let mut g = Golden { dp: balancer(), ingress: ifindex("g0"), results: Vec::new() };
    let (vips, versions) = quic_vips();
    configure_quic(&mut g.dp, &vips, &versions);

    nat(&mut g, &vips, &versions);
    dsr(&mut g, &vips, &versions);
    nat66(&mut g, &vips, &versions);

    let failed = g.failures();
    println!("{} QUIC golden cases, {} failed", g.results.len(), failed.len());
    assert!(g.results.len() >= 18);
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
}

fn nat(g: &mut Golden, vips: &[Vip6], versions: &[CidVersion]) {
    let vip = &vips[NAT];
    let vip_addr = addr4(vip.addr);
    let backend = |i: usize| (addr4(vip.backends[i].1), vip.backends[i].2);
    let to = |f: &Frame, i: usize| nat_out(f, (f.src, f.src_port), backend(i), LB_MAC, mac_of(backend(i).0));
    let home = ring_pick(&ipv4_bytes(CLIENT));
    let other = 1 - home;
    let moved = moved_client();
    let id_of = |i: usize| cid(versions[NAT], server_id(i));
    let from = |client: [u8; 4], port: u16, payload: Vec<u8>| {
        Frame::udp(client, port, vip_addr, PORT).with(|f| f.payload = payload)
    };

    // The Initial's connection ID is the client's choice: even one that reads as a server id
    // must not route (the ring places the connection, as Katran does).
    let f = from(CLIENT, 50000, initial(id_of(other)));
    g.run(quic_case(
        "QUIC Initial (long header), DCID that reads as another server's id: placed by the ring",
        f.bytes(),
        to(&f, home),
        &[Counter::QuicLongHeader, Counter::FlowNew],
    ));
    let f = from(CLIENT, 50000, short_header(id_of(home)));
    g.run(quic_case(
        "QUIC short header naming its backend, same 5-tuple: that backend (flow hit)",
        f.bytes(),
        to(&f, home),
        &[Counter::QuicRouted, Counter::FlowHit],
    ));
    let f = from(moved, 50001, short_header(id_of(home)));
    g.run(quic_case(
        "QUIC short header from a new address and port (rebinding): still its server's backend",
        f.bytes(),
        to(&f, home),
        &[Counter::QuicRouted, Counter::FlowNew],
    ));
    let f = from(moved, 50001, short_header(id_of(home)));
    g.run(quic_case(
        "QUIC short header, the rebound 5-tuple again: same backend, recorded",
        f.bytes(),
        to(&f, home),
        &[Counter::QuicRouted, Counter::FlowHit],
    ));
    let f = from(CLIENT, 50000, short_header(id_of(other)));
    g.run(quic_case(
        "QUIC short header naming another backend than the table's entry: the named one",
        f.bytes(),
        to(&f, other),
        &[Counter::QuicRouted, Counter::FlowRerouted],
    ));
    let f = from(moved, 50002, short_header(cid(versions[NAT], UNKNOWN_ID)));
    g.run(quic_case(
        "QUIC short header with an unknown server id: placed by the ring",
        f.bytes(),
        to(&f, other),
        &[Counter::QuicUnknownServer, Counter::FlowNew],
    ));
    let f = from(moved, 50003, short_header(cid(versions[NAT], STALE_ID)));
    g.run(quic_case(
        "QUIC short header naming a removed backend's id (stale): placed by the ring",
        f.bytes(),
        to(&f, other),
        &[Counter::QuicUnknownServer, Counter::FlowNew],
    ));
    let mut v0 = id_of(home);
    v0[0] &= 0x3f;
    let f = from(moved, 50004, short_header(v0));
    g.run(quic_case(
        "QUIC short header, CID version 0 (no server id): placed by the ring",
        f.bytes(),
        to(&f, other),
        &[Counter::QuicNoServerId, Counter::FlowNew],
    ));
    let f = from(moved, 50005, short_header(id_of(home))[..4].to_vec());
    g.run(quic_case(
        "QUIC short header truncated inside its connection ID: placed by the ring",
        f.bytes(),
        to(&f, other),
        &[Counter::QuicTruncated, Counter::FlowNew],
    ));
    // A one-byte datagram in a frame padded to Ethernet's minimum with bytes that read as a
    // connection ID naming `home`: the padding is not the datagram's.
    let f = from(moved, 50006, vec![0x41]);
    let padding: Vec<u8> = id_of(home).iter().chain(&[0u8; 8]).copied().collect();
    let padded = [f.bytes(), padding.clone()].concat();
    g.run(quic_case(
        "QUIC VIP, 1-byte datagram in a frame padded with a valid-looking CID: ring",
        padded,
        [to(&f, other), padding].concat(),
        &[Counter::QuicTruncated, Counter::FlowNew],
    ));
    let f = from(moved, 50007, Vec::new());
    g.run(quic_case(
        "QUIC VIP, empty UDP datagram: placed by the ring",
        f.bytes(),
        to(&f, other),
        &[Counter::QuicTruncated, Counter::FlowNew],
    ));
    // A DNS query: id 0x1234, then flags; read as a short header its CID has version 0.
    let dns = vec![0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 3, b'w', b'w', b'w', 0];
    let f = from(moved, 50008, dns);
    g.run(quic_case(
        "non-QUIC UDP (a DNS query) on a QUIC VIP: placed by the ring",
        f.bytes(),
        to(&f, other),
        &[Counter::QuicNoServerId, Counter::FlowNew],
    ));
    // What the map writer does when `home` is drained or goes down: its id no longer routes.
    let key = QuicServerKey { vip_id: NAT as u32, server_id: server_id(home) };
    g.dp.set_quic_server(key, None).unwrap();
    let f = from(moved, 50009, short_header(id_of(home)));
    g.run(quic_case(
        "QUIC short header naming a drained backend's id: placed by the ring",
        f.bytes(),
        to(&f, other),
        &[Counter::QuicUnknownServer, Counter::FlowNew],
    ));
    let f = from(moved, 50001, short_header(id_of(home)));
    g.run(quic_case(
        "QUIC short header naming a drained backend, flow recorded: stays (flow hit)",
        f.bytes(),
        to(&f, home),
        &[Counter::QuicUnknownServer, Counter::FlowHit],
    ));
    g.dp.set_quic_server(key, Some(vip.backends[home].0)).unwrap();

    // The same short header on a UDP VIP without quic: its ids mean nothing there.
    let plain = &vips[PLAIN];
    let f = Frame::udp(moved, 50010, addr4(plain.addr), PORT).with(|f| f.payload = short_header(id_of(home)));
    let b = (addr4(plain.backends[other].1), plain.backends[other].2);
    let mut c = case(
        "QUIC short header on a UDP VIP without quic: placed by the ring",
        f.bytes(),
        XDP_TX,
        Some(nat_out(&f, (moved, 50010), b, LB_MAC, mac_of(b.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    c.unchanged = QUIC_COUNTERS.to_vec();
    g.run(c);
}

/// The DSR modes: a rebound client's short header reaches its server's backend, wrapped (IP in
/// IP, GUE) or by MAC, with the CID versions 2 and 3.
fn dsr(g: &mut Golden, vips: &[Vip6], versions: &[CidVersion]) {
    let home = ring_pick(&ipv4_bytes(CLIENT));
    let moved = moved_client();
    for (index, name) in [
        (IPIP, "QUIC short header, dsr-ipip (CID v2), rebound client: its server's backend"),
        (GUE, "QUIC short header, dsr-gue (CID v3), rebound client: its server's backend"),
        (L2, "QUIC short header, dsr-l2, rebound client: its server's backend"),
    ] {
        let vip = &vips[index];
        let backend = addr4(vip.backends[home].1);
        let f = Frame::udp(moved, 51000, addr4(vip.addr), PORT)
            .with(|f| f.payload = short_header(cid(versions[index], server_id(home))));
        let out = match index {
            IPIP => ipip(&f, LB_ADDR, backend, LB_MAC, mac_of(backend)),
            GUE => {
                let key = FlowKey::new(
                    ipv4_bytes(moved),
                    ipv4_bytes(addr4(vip.addr)),
                    51000u16.to_be(),
                    PORT.to_be(),
                    ip_proto::UDP,
                    family::IPV4,
                );
                let port = lb_common::gue::source_port(g.dp.table_hash_of(&key));
                gue_frame(&f.bytes(), f.l3_offset(), (LB_ADDR, backend), port, LB_MAC, mac_of(backend))
            }
            _ => by_mac(&f.bytes(), mac_of(backend)),
        };
        g.run(quic_case(name, f.bytes(), out, &[Counter::QuicRouted, Counter::FlowNew]));
    }
}

fn by_mac(frame: &[u8], dmac: Mac) -> Vec<u8> {
    let mut out = frame.to_vec();
    out[0..6].copy_from_slice(&dmac);
    out[6..12].copy_from_slice(&LB_MAC);
    out
}

fn nat66(g: &mut Golden, vips: &[Vip6], versions: &[CidVersion]) {
    let vip = &vips[NAT6];
    let IpAddr::V6(vip_addr) = vip.addr else { panic!("an IPv6 VIP") };
    let home = ring_pick(&CLIENT6);
    let other = 1 - home;
    let moved = (0x20..0xff).map(seg).find(|a| ring_pick(a) != home).unwrap();
    let backend = |i: usize| {
        let IpAddr::V6(a) = vip.backends[i].1 else { panic!("an IPv6 backend") };
        (a.octets(), vip.backends[i].2)
    };
    let to = |f: &Frame6, i: usize| nat_out(f, (f.src, f.src_port), backend(i), LB_MAC, mac6(backend(i).0));
    let from = |client: [u8; 16], port: u16, payload: Vec<u8>| {
        Frame6::udp(client, port, vip_addr.octets(), PORT).with(|f| f.payload = payload)
    };
    let id_of = |i: usize| cid(versions[NAT6], server_id(i));
    let f = from(CLIENT6, 52000, initial(id_of(other)));
    g.run(quic_case(
        "IPv6 QUIC Initial: placed by the ring",
        f.bytes(),
        to(&f, home),
        &[Counter::QuicLongHeader, Counter::FlowNew],
    ));
    let f = from(moved, 52001, short_header(id_of(home)));
    g.run(quic_case(
        "IPv6 QUIC short header from a new address (rebinding): its server's backend",
        f.bytes(),
        to(&f, home),
        &[Counter::QuicRouted, Counter::FlowNew],
    ));
    let f = from(moved, 52002, short_header(cid(versions[NAT6], UNKNOWN_ID)));
    g.run(quic_case(
        "IPv6 QUIC short header with an unknown server id: placed by the ring",
        f.bytes(),
        to(&f, other),
        &[Counter::QuicUnknownServer, Counter::FlowNew],
    ));
    let f = from(moved, 52003, short_header(id_of(home))[..6].to_vec());
    g.run(quic_case(
        "IPv6 QUIC short header truncated: placed by the ring",
        f.bytes(),
        to(&f, other),
        &[Counter::QuicTruncated, Counter::FlowNew],
    ));
}
