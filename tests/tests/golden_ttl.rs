//! Golden packets for an expiring TTL (hop limit) on every DSR path. A packet that arrives with
//! TTL 1 or 0 would die at the next router; the balancer, as for NAT, passes it untouched to
//! the stack (which answers the client with ICMP "time exceeded") instead of forwarding it, and
//! counts it as `pass_ttl_expired`. It starts no flow. Run through the real lb_ingress with
//! BPF_PROG_TEST_RUN, on the golden fixtures' namespaces and VIPs. Needs root.

use lb_common::stats::Counter;
use lb_tests::fixture::{CLIENT, balancer, configure, lab, vips};
use lb_tests::fixture6::{CLIENT6, Frame6, configure6, lab6, vip6, vips6};
use lb_tests::golden::{Case, XDP_PASS, case, run_case};
use lb_tests::netns::ifindex;
use lb_tests::packets::Frame;
use lb_tests::privileges::require_root;

/// The TTLs (hop limits) a packet may not be forwarded with.
const EXPIRING: [u8; 2] = [1, 0];

/// The case of one expiring packet: passed byte for byte, counted as expired, no flow started.
fn expiring(mode: &str, ttl: u8, input: Vec<u8>) -> Case {
    let name: &'static str = Box::leak(format!("{mode}, TTL {ttl}: pass untouched").into_boxed_str());
    let mut c = case(name, input, XDP_PASS, None, Counter::PassTtlExpired);
    c.unchanged = vec![Counter::FlowNew];
    c
}

/// Runs the cases on the loaded balancer and panics naming every one that failed.
fn run_all(dp: &mut lb_ctl::dataplane::aya::AyaDataplane, cases: Vec<Case>) {
    let ingress = ifindex("g0");
    let failed: Vec<String> =
        cases.iter().filter_map(|c| run_case(dp, ingress, c).err().map(|e| format!("{}: {e}", c.name))).collect();
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
}

#[test]
fn dsr_passes_expiring_ipv4_packets() {
    if !require_root("dsr_passes_expiring_ipv4_packets") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let mut dp = balancer();
    configure(&mut dp, &vips());
    // The IPv4 fixture's DSR VIPs (see `fixture::vips`), each to a reachable backend.
    let modes = [
        ("dsr-ipip, IPv4 in IPv4", [203, 0, 113, 20]),
        ("dsr-gue, IPv4 in IPv4 and UDP", [203, 0, 113, 72]),
        ("dsr-l2, IPv4", [203, 0, 113, 70]),
    ];
    let mut cases = Vec::new();
    for (mode, vip) in modes {
        for ttl in EXPIRING {
            cases.push(expiring(mode, ttl, Frame::tcp(CLIENT, 40000, vip, 80).with(|f| f.ttl = ttl).bytes()));
        }
    }
    run_all(&mut dp, cases);
}

#[test]
fn dsr_passes_expiring_ipv6_packets() {
    if !require_root("dsr_passes_expiring_ipv6_packets") {
        return;
    }
    let ns = lab6();
    let _inside = ns.enter();
    let mut dp = balancer();
    configure6(&mut dp, &vips6());
    // The IPv6 fixture's DSR VIPs (see `fixture6::vips6`).
    let v6_modes = [
        ("dsr-ipip, IPv6 in IPv6", vip6(0x20)),
        ("dsr-ipip, IPv6 in IPv4 (6in4)", vip6(0x21)),
        ("dsr-gue, IPv6 in IPv6 and UDP", vip6(0x22)),
        ("dsr-l2, IPv6", vip6(0x23)),
    ];
    let mut cases = Vec::new();
    for (mode, vip) in v6_modes {
        for hop_limit in EXPIRING {
            let frame = Frame6::tcp(CLIENT6, 40000, vip, 80).with(|f| f.ttl = hop_limit);
            cases.push(expiring(mode, hop_limit, frame.bytes()));
        }
    }
    // An IPv4 VIP whose backend is IPv6: IPv4 in IPv6 (4in6).
    for ttl in EXPIRING {
        let frame = Frame::tcp(CLIENT, 40000, [203, 0, 113, 90], 80).with(|f| f.ttl = ttl);
        cases.push(expiring("dsr-ipip, IPv4 in IPv6 (4in6)", ttl, frame.bytes()));
    }
    run_all(&mut dp, cases);
}
