//! End to end through the XDP program: a namespace lab (client, balancer, two backends on one
//! L2 segment) with real HTTP over TCP, in NAT mode and in DSR (IPIP) mode with the backends
//! decapsulating with lb_decap. Needs root.
use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use lb_common::program_names;
use lb_common::stats::{Counter, DecapCounter};
use lb_common::vip::{forwarding, hash_mode};
use lb_common::ip_proto;
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::load::{AttachMode, LoadOptions, attach, load_decap, load_ingress};
use lb_ctl::dataplane::maps::AyaDataplane;
use lb_tests::balancer::{VipSpec, configure};
use lb_tests::lab::{Lab, backend_addr, client_addr, http_get, pattern_byte, wait_for_listener};
use lb_tests::privileges::require_root;

const CLIENTS: usize = 16;
const RING: u32 = 65537;
const NAT_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const DSR_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
const LARGE: usize = 2 * 1024 * 1024 + 12345;

fn counter(dp: &AyaDataplane, c: Counter) -> u64 {
    dp.counters().unwrap().into_iter().find(|(k, _)| *k == c).unwrap().1
}

fn decap_count(ebpf: &aya::Ebpf, c: DecapCounter) -> u64 {
    let map: aya::maps::PerCpuArray<_, u64> =
        aya::maps::PerCpuArray::try_from(ebpf.map(lb_common::map_names::DECAP_COUNTERS).unwrap()).unwrap();
    map.get(&(c as u32), 0).unwrap().iter().sum()
}

/// Every client asks the VIP which backend it reached, twice; returns client → backend name.
fn spread(vip: SocketAddrV4) -> HashMap<Ipv4Addr, String> {
    let mut seen = HashMap::new();
    for i in 0..CLIENTS {
        let src = client_addr(i);
        for round in 0..2 {
            let (status, body) = http_get(src, vip, "/").unwrap_or_else(|e| panic!("{src} → {vip}: {e}"));
            assert_eq!(status, 200);
            let name = String::from_utf8(body).unwrap().trim().to_string();
            if round == 1 {
                assert_eq!(seen.get(&src), Some(&name), "hash=ip: client {src} must stick to one backend");
            }
            seen.insert(src, name);
        }
    }
    seen
}

fn large_response(vip: SocketAddrV4) {
    let (status, body) = http_get(client_addr(0), vip, &format!("/bytes/{LARGE}")).unwrap();
    assert_eq!(status, 200);
    assert_eq!(body.len(), LARGE, "length of the large response");
    let first_bad = body.iter().enumerate().position(|(i, b)| *b != pattern_byte(i));
    assert_eq!(first_bad, None, "large response differs at byte {first_bad:?}");
}

#[test]
fn http_through_xdp_in_nat_and_dsr_modes() {
    if !require_root("http_through_xdp_in_nat_and_dsr_modes") {
        return;
    }
    let backend_bin = env!("CARGO_BIN_EXE_lb-test-backend");
    let mut lab = Lab::new("e", 2, CLIENTS);

    // Backends: NAT service on :8080, DSR service on the VIP's port 80 (VIP held on lo).
    let mut decaps = Vec::new();
    for i in 0..2 {
        let name = format!("backend-{i}");
        let ns_name = lab.backends[i].name.clone();
        lab.backends[i].exec(&["ip", "addr", "add", &format!("{DSR_VIP}/32"), "dev", "lo"]);
        lab.spawn(&ns_name, &[backend_bin, "0.0.0.0:8080", &name]);
        lab.spawn(&ns_name, &[backend_bin, "0.0.0.0:80", &name]);
        let _in = lab.backends[i].enter();
        let mut decap = load_decap().unwrap();
        attach(&mut decap, program_names::DECAP, "eth0", AttachMode::Native).unwrap();
        decaps.push(decap);
    }

    // The switch port facing the balancer needs an XDP program for native XDP_TX to deliver.
    let mut pass = load_decap().unwrap();
    {
        let _in = lab.switch.enter();
        attach(&mut pass, program_names::PASS, "p-lb", AttachMode::Native).unwrap();
    }

    let mut dp = {
        let _in = lab.lb.enter();
        let mut ebpf = load_ingress(&LoadOptions { pin_dir: None, ring_size: RING, flow_table_size: 65536 }).unwrap();
        attach(&mut ebpf, program_names::INGRESS, "eth0", AttachMode::Native).unwrap();
        AyaDataplane::new(ebpf, RING)
    };
    let backends = |port| (0..2).map(|i| (i as u32 + if port == 80 { 2 } else { 0 }, backend_addr(i), port, 100)).collect();
    configure(&mut dp, RING, &[
        VipSpec { id: 0, addr: NAT_VIP, port: 80, protocol: ip_proto::TCP, forwarding: forwarding::NAT, hash: hash_mode::CLIENT_IP, encap_source: Ipv4Addr::new(198, 51, 100, 1), backends: backends(8080) },
        VipSpec { id: 1, addr: DSR_VIP, port: 80, protocol: ip_proto::TCP, forwarding: forwarding::DSR_IPIP, hash: hash_mode::CLIENT_IP, encap_source: Ipv4Addr::new(198, 51, 100, 1), backends: backends(80) },
    ]);
    // Resolve the backends' MACs on the balancer, as its health checks would.
    for i in 0..2 {
        lab.lb.exec(&["ping", "-c1", "-W2", &backend_addr(i).to_string()]);
        let _in = lab.backends[i].enter();
        wait_for_listener(SocketAddr::from((backend_addr(i), 8080)), Duration::from_secs(10));
        wait_for_listener(SocketAddr::from((backend_addr(i), 80)), Duration::from_secs(10));
    }

    let _in = lab.client.enter();
    for (mode, vip) in [("nat", NAT_VIP), ("dsr-ipip", DSR_VIP)] {
        let vip = SocketAddrV4::new(vip, 80);
        let tx_before = counter(&dp, Counter::ForwardTx);
        let seen = spread(vip);
        let names: HashSet<&String> = seen.values().collect();
        println!("{mode}: {CLIENTS} clients spread over {names:?}");
        assert_eq!(names.len(), 2, "{mode}: clients must reach both backends");
        large_response(vip);
        println!("{mode}: {LARGE}-byte response arrived byte-exact");
        let tx = counter(&dp, Counter::ForwardTx) - tx_before;
        assert!(tx > 0, "{mode}: the XDP program forwarded nothing");
        println!("{mode}: forward_tx {tx}");
    }
    let replies = counter(&dp, Counter::NatReply);
    assert!(replies > 700, "NAT replies rewritten by XDP: {replies}");
    let decapsulated: u64 = decaps.iter().map(|d| decap_count(d, DecapCounter::Decapsulated)).sum();
    assert!(decapsulated > 64, "IPIP packets decapsulated by lb_decap: {decapsulated}");
    println!("nat_reply {replies}, decapsulated {decapsulated}");
}
