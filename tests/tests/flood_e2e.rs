//! Established connections through the XDP balancer (NAT, a small connection table) under a
//! spoofed-SYN flood from a raw socket, with a backend added to the ring mid-flood: none may
//! break, and no packet may reach the client side with a backend's own address. Needs root.
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use lb_common::ip_proto;
use lb_common::program_names;
use lb_common::stats::Counter;
use lb_common::vip::{forwarding, hash_mode};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_ctl::dataplane::load::{AttachMode, attach, load_decap};
use lb_tests::balancer::{VipSpec, attach_ingress, configure};
use lb_tests::flood::{Flood, FloodSpec, KeepAlive, LeakWatcher, mac_bytes};
use lb_tests::lab::{Lab, backend_addr, mac_of, wait_for_listener};
use lb_tests::privileges::require_root;

const RING: u32 = 65537;
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const CONNECTIONS: usize = 10;
/// The connection table: 1024 flows (256 sets of 4 ways), far fewer than the flood's sources.
const FLOWS: u32 = 1024;
const FLOOD_TIME: Duration = Duration::from_secs(8);
const FLOOD_MAX_FRAMES: u64 = 4_000_000;

fn counter(dp: &AyaDataplane, c: Counter) -> u64 {
    dp.counters().unwrap().into_iter().find(|(k, _)| *k == c).unwrap().1
}

#[test]
fn established_connections_survive_a_syn_flood_and_a_ring_change() {
    if !require_root("established_connections_survive_a_syn_flood_and_a_ring_change") {
        return;
    }
    let backend_bin = env!("CARGO_BIN_EXE_lb-test-backend");
    let mut lab = Lab::new("fl", 3, CONNECTIONS);
    for i in 0..3 {
        let ns = lab.backends[i].name.clone();
        lab.spawn(&ns, &[backend_bin, "0.0.0.0:8080", &format!("backend-{i}")]);
    }
    let mut pass = load_decap().unwrap();
    {
        let _in = lab.switch.enter();
        attach(&mut pass, program_names::PASS, "p-lb", AttachMode::Native).unwrap();
    }
    let mut dp = attach_ingress(&lab.lb, RING, FLOWS).unwrap();
    let spec = |backends: usize| VipSpec {
        id: 0,
        addr: VIP,
        port: 80,
        protocol: ip_proto::TCP,
        forwarding: forwarding::NAT,
        hash: hash_mode::FLOW,
        encap_source: Ipv4Addr::new(198, 51, 100, 1),
        backends: (0..backends).map(|i| (i as u32, backend_addr(i), 8080, 100)).collect(),
    };
    configure(&mut dp, RING, &[spec(2)]);
    for i in 0..3 {
        lab.lb.exec(&["ping", "-c1", "-W2", &backend_addr(i).to_string()]);
        let _in = lab.backends[i].enter();
        wait_for_listener(SocketAddr::from((backend_addr(i), 8080)), Duration::from_secs(10));
    }
    let client_ns = lab.client.name.clone();
    let leaks = LeakWatcher::start(&client_ns, (0..3).map(backend_addr).collect());
    // The long-lived connections, established before the flood.
    let connections = KeepAlive::start(&client_ns, SocketAddrV4::new(VIP, 80), CONNECTIONS);
    std::thread::sleep(Duration::from_secs(1));
    // The flood: SYNs from 65536 spoofed 5-tuples (64 times the table), as fast as one thread
    // sends. Halfway, a third backend joins the ring.
    let flood = Flood::start(
        &client_ns,
        FloodSpec {
            target: SocketAddrV4::new(VIP, 80),
            src_mac: mac_bytes(&mac_of(&lab.client, "eth0")),
            dst_mac: mac_bytes(&mac_of(&lab.lb, "eth0")),
            rate: None,
            duration: FLOOD_TIME,
            max_frames: FLOOD_MAX_FRAMES,
        },
    );
    std::thread::sleep(FLOOD_TIME / 2);
    configure(&mut dp, RING, &[spec(3)]);
    let sent = flood.join();
    std::thread::sleep(Duration::from_secs(1));
    let requests = connections.requests.clone();
    let broken = connections.stop();
    let leaked = leaks.stop();
    println!(
        "flood: {} spoofed SYNs in {:.1} s ({:.0} pps); {} requests on {CONNECTIONS} connections; flow_new {}, table_full {}, set_proven {}, unrecorded {}, reverse_restored {}, leaked {leaked}",
        sent.frames,
        sent.took.as_secs_f64(),
        sent.pps(),
        requests.load(std::sync::atomic::Ordering::Relaxed),
        counter(&dp, Counter::FlowNew),
        counter(&dp, Counter::FlowTableFull),
        counter(&dp, Counter::FlowSetProven),
        counter(&dp, Counter::FlowUnrecorded),
        counter(&dp, Counter::ReverseRestored),
    );
    assert!(sent.frames > 10_000, "the flood must have been a flood: {} frames", sent.frames);
    assert!(broken.is_empty(), "broken connections:\n{}", broken.join("\n"));
    assert_eq!(leaked, 0, "packets reached the client side with a backend's address");
}
