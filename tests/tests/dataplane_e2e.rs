//! End to end through the XDP program: a namespace lab (client, balancer, two backends on one
//! L2 segment) with real HTTP over TCP, in NAT mode and in DSR (IPIP) mode with the backends
//! decapsulating with lb_decap. Needs root.
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use lb_common::ip_proto;
use lb_common::stats::{Counter, DecapCounter};
use lb_common::vip::{forwarding, hash_mode};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_ctl::dataplane::load::AttachMode;
use lb_tests::balancer::{VipSpec, attach_ingress, configure};
use lb_tests::lab::{
    LB_PORT, Lab, backend_addr, client_addr, http_get, http_post, pattern_byte, spread, udp_refused, wait_for_listener,
};
use lb_tests::privileges::require_root;

const CLIENTS: usize = 16;
const RING: u32 = 65537;
const NAT_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const DSR_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
/// DSR by MAC rewrite: the backends are on the balancer's segment.
const L2_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 21);
/// DSR over GUE: lb_decap removes the outer IPv4 and UDP headers.
const GUE_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 22);
const LARGE: usize = 2 * 1024 * 1024 + 12345;
const UPLOAD: usize = 1024 * 1024;

fn counter(dp: &AyaDataplane, c: Counter) -> u64 {
    dp.counters().unwrap().into_iter().find(|(k, _)| *k == c).unwrap().1
}

/// A decapsulator counter, read from the map `lb-ctl decap attach` pinned in `pin_dir`.
fn decap_count(pin_dir: &std::path::Path, c: DecapCounter) -> u64 {
    let path = pin_dir.join(lb_common::map_names::DECAP_COUNTERS);
    let data = aya::maps::MapData::from_pin(&path).unwrap();
    let map: aya::maps::PerCpuArray<_, u64> =
        aya::maps::PerCpuArray::try_from(aya::maps::Map::PerCpuArray(data)).unwrap();
    map.get(&(c as u32), 0).unwrap().iter().sum()
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
    let lb_ctl = lb_tests::lb_ctl_bin();
    let mut decaps: Vec<lb_ctl::paths::AttachPaths> = Vec::new();
    /// Takes the decapsulators off when the test ends, also by panic (the lab's namespaces
    /// go, but bpffs pins would stay).
    struct DecapPins(Vec<lb_ctl::paths::AttachPaths>);
    impl Drop for DecapPins {
        fn drop(&mut self) {
            for paths in &self.0 {
                let _ = lb_ctl::dataplane::attach::detach_decap_at(paths);
            }
        }
    }
    for i in 0..2 {
        let name = format!("backend-{i}");
        let ns_name = lab.backends[i].name.clone();
        lab.backends[i].exec(&["ip", "addr", "add", &format!("{DSR_VIP}/32"), "dev", "lo"]);
        lab.backends[i].exec(&["ip", "addr", "add", &format!("{L2_VIP}/32"), "dev", "lo"]);
        lab.backends[i].exec(&["ip", "addr", "add", &format!("{GUE_VIP}/32"), "dev", "lo"]);
        lab.spawn(&ns_name, &[backend_bin, "0.0.0.0:8080", &name]);
        lab.spawn(&ns_name, &[backend_bin, "0.0.0.0:80", &name]);
        // The product command, as an operator runs it on a DSR backend. nsenter enters only
        // the network namespace, so the pin lands in the host's bpffs and outlives the command.
        lb_tests::netns::sh(&[
            "nsenter",
            &format!("--net=/run/netns/{ns_name}"),
            lb_ctl.to_str().unwrap(),
            "decap",
            "attach",
            "eth0",
            "--from",
            "198.51.100.1",
            "--xdp-mode",
            "native",
        ]);
        let _in = lab.backends[i].enter();
        decaps.push(lb_ctl::paths::AttachPaths::decap("eth0"));
    }
    let _decap_pins = DecapPins(decaps.clone());

    // The switch port facing the balancer needs an XDP program for native XDP_TX to deliver.
    lab.pass_on_switch_port(LB_PORT);

    let mut dp = attach_ingress(&lab.lb, RING, 65536).unwrap();
    let backends =
        |port| (0..2).map(|i| (i as u32 + if port == 80 { 2 } else { 0 }, backend_addr(i), port, 100)).collect();
    configure(
        &mut dp,
        RING,
        &[
            VipSpec {
                id: 0,
                addr: NAT_VIP,
                port: 80,
                protocol: ip_proto::TCP,
                forwarding: forwarding::NAT,
                hash: hash_mode::CLIENT_IP,
                encap_source: Ipv4Addr::new(198, 51, 100, 1),
                backends: backends(8080),
            },
            VipSpec {
                id: 1,
                addr: DSR_VIP,
                port: 80,
                protocol: ip_proto::TCP,
                forwarding: forwarding::DSR_IPIP,
                hash: hash_mode::CLIENT_IP,
                encap_source: Ipv4Addr::new(198, 51, 100, 1),
                backends: backends(80),
            },
            VipSpec {
                id: 2,
                addr: L2_VIP,
                port: 80,
                protocol: ip_proto::TCP,
                forwarding: forwarding::DSR_L2,
                hash: hash_mode::CLIENT_IP,
                encap_source: Ipv4Addr::new(198, 51, 100, 1),
                backends: (0..2).map(|i| (i as u32 + 4, backend_addr(i), 80, 100)).collect(),
            },
            VipSpec {
                id: 3,
                addr: GUE_VIP,
                port: 80,
                protocol: ip_proto::TCP,
                forwarding: forwarding::DSR_GUE,
                hash: hash_mode::CLIENT_IP,
                encap_source: Ipv4Addr::new(198, 51, 100, 1),
                backends: (0..2).map(|i| (i as u32 + 6, backend_addr(i), 80, 100)).collect(),
            },
        ],
    );
    // Resolve the backends' MACs on the balancer, as its health checks would.
    for i in 0..2 {
        lab.lb.exec(&["ping", "-c1", "-W2", &backend_addr(i).to_string()]);
        let _in = lab.backends[i].enter();
        wait_for_listener(SocketAddr::from((backend_addr(i), 8080)), Duration::from_secs(10));
        wait_for_listener(SocketAddr::from((backend_addr(i), 80)), Duration::from_secs(10));
    }

    let _in = lab.client.enter();
    for (mode, vip) in [("nat", NAT_VIP), ("dsr-ipip", DSR_VIP), ("dsr-l2", L2_VIP), ("dsr-gue", GUE_VIP)] {
        let vip = SocketAddrV4::new(vip, 80);
        let tx_before = counter(&dp, Counter::ForwardTx);
        let clients: Vec<IpAddr> = (0..CLIENTS).map(|i| IpAddr::V4(client_addr(i))).collect();
        let seen = spread(&clients, vip.into());
        let names: HashSet<&String> = seen.values().collect();
        println!("{mode}: {CLIENTS} clients spread over {names:?}");
        assert_eq!(names.len(), 2, "{mode}: clients must reach both backends");
        large_response(vip);
        println!("{mode}: {LARGE}-byte response arrived byte-exact");
        // Full-size client segments: in DSR mode they no longer fit once encapsulated, and only
        // the balancer's ICMP "fragmentation needed" lets the client shrink them.
        let upload: Vec<u8> = (0..UPLOAD).map(|i| (i % 241) as u8).collect();
        let (status, answer) =
            http_post(client_addr(1), vip, "/upload", &upload).unwrap_or_else(|e| panic!("{mode}: upload: {e}"));
        let sum: u64 = upload.iter().map(|b| *b as u64).sum();
        assert_eq!(
            (status, String::from_utf8_lossy(&answer).trim()),
            (200, format!("received {UPLOAD} sum {sum}").as_str()),
            "{mode}: upload"
        );
        println!("{mode}: {UPLOAD}-byte upload arrived intact");
        let tx = counter(&dp, Counter::ForwardTx) - tx_before;
        assert!(tx > 0, "{mode}: the XDP program forwarded nothing");
        println!("{mode}: forward_tx {tx}");
    }
    let replies = counter(&dp, Counter::NatReply);
    assert!(replies > 700, "NAT replies rewritten by XDP: {replies}");
    let per_backend: Vec<u64> =
        decaps.iter().map(|paths| decap_count(&paths.pin_dir, DecapCounter::Decapsulated)).collect();
    let decapsulated: u64 = per_backend.iter().sum();
    assert!(per_backend.iter().all(|n| *n > 0), "every DSR backend decapsulated: {per_backend:?}");
    assert!(decapsulated > 64, "IPIP packets decapsulated by lb_decap: {decapsulated}");
    // `lb-ctl decap detach` removes what `decap attach` pinned.
    drop(_in);
    for (i, dir) in decaps.iter().enumerate() {
        let ns = &lab.backends[i].name;
        lb_tests::netns::sh(&[
            "nsenter",
            &format!("--net=/run/netns/{ns}"),
            lb_ctl.to_str().unwrap(),
            "decap",
            "detach",
            "eth0",
        ]);
        assert!(!dir.pin_dir.exists(), "{} left behind", dir.pin_dir.display());
    }
    let icmp = counter(&dp, Counter::ForwardIcmpTooBig);
    assert!(icmp > 0, "the DSR upload needed ICMP fragmentation-needed answers");
    println!("nat_reply {replies}, decapsulated {decapsulated}, icmp too big {icmp}");
}

/// The balancer outlives its loader: the maps and the XDP link are pinned, a second `open`
/// swaps its program into the pinned link and reuses the connection table, and a long-lived
/// connection through the VIP carries on across that; `detach` then takes the balancer off.
#[test]
fn pinned_balancer_survives_a_reload_and_detaches() {
    use lb_ctl::dataplane::attach::{OpenOptions, detach, open};
    use lb_ctl::paths::AttachPaths;
    use std::io::Read;
    if !require_root("pinned_balancer_survives_a_reload_and_detaches") {
        return;
    }
    let backend_bin = env!("CARGO_BIN_EXE_lb-test-backend");
    let mut lab = Lab::new("r", 1, 1);
    let b0 = lab.backends[0].name.clone();
    lab.spawn(&b0, &[backend_bin, "0.0.0.0:8080", "backend-0"]);
    lab.pass_on_switch_port(LB_PORT);
    let pin_dir = std::path::PathBuf::from(format!("/sys/fs/bpf/{}", lb_tests::netns::run_name("pins")));
    let state_dir = tempfile::tempdir().unwrap();
    let paths = {
        let _in = lab.lb.enter();
        AttachPaths::balancer("eth0", Some(pin_dir.clone()), Some(state_dir.path().to_path_buf()))
    };
    /// Detaches (removing the pins) when the test ends, also by panic.
    struct Pins(AttachPaths);
    impl Drop for Pins {
        fn drop(&mut self) {
            let _ = detach(&self.0);
        }
    }
    let _pins = Pins(paths.clone());
    let options = OpenOptions { mode: AttachMode::Auto, paths: paths.clone(), ring_size: 251, flow_table_size: 4096 };
    let spec = || VipSpec {
        id: 0,
        addr: NAT_VIP,
        port: 80,
        protocol: ip_proto::TCP,
        forwarding: forwarding::NAT,
        hash: hash_mode::CLIENT_IP,
        encap_source: Ipv4Addr::new(198, 51, 100, 1),
        backends: vec![(0, backend_addr(0), 8080, 100)],
    };
    let first = {
        let _in = lab.lb.enter();
        open("eth0", &options).unwrap()
    };
    assert!(!first.reused_maps && first.previous_program.is_none());
    let mut dp = first.dataplane;
    configure(&mut dp, 251, &[spec()]);
    lab.lb.exec(&["ping", "-c1", "-W2", &backend_addr(0).to_string()]);
    {
        let _in = lab.backends[0].enter();
        wait_for_listener(SocketAddr::from((backend_addr(0), 8080)), Duration::from_secs(10));
    }

    let _in = lab.client.enter();
    // A connection that stays open: one byte a second for 4 seconds.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((client_addr(0), 0)).into()).unwrap();
    socket.connect_timeout(&SocketAddr::from((NAT_VIP, 80)).into(), Duration::from_secs(5)).unwrap();
    let mut stream: std::net::TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut stream, b"GET /hold/4 HTTP/1.1\r\nHost: vip\r\n\r\n").unwrap();
    let mut first_bytes = [0u8; 64];
    let n = stream.read(&mut first_bytes).unwrap();
    assert!(n > 0);

    // "Restart": the first loader goes away entirely, a second one opens the pinned balancer.
    drop(dp);
    let second = {
        let _back = lab.lb.enter();
        open("eth0", &options).unwrap()
    };
    assert!(second.reused_maps, "the pinned maps were reused");
    assert!(second.previous_program.is_some(), "the pinned link now runs the new program");
    let dp = second.dataplane;
    assert!(dp.flows_per_backend().unwrap().get(&0).copied().unwrap_or(0) >= 1, "connection table kept");

    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    let all = [&first_bytes[..n], &rest[..]].concat();
    assert!(
        all.ends_with(b"...."),
        "the long-lived connection finished across the reload: {:?}",
        String::from_utf8_lossy(&all)
    );
    let hits = counter(&dp, Counter::FlowHit);
    assert!(hits > 0, "the reloaded program served the established flow from the kept table");

    drop(dp);
    {
        let _back = lab.lb.enter();
        detach(&paths).unwrap();
    }
    assert!(!pin_dir.exists(), "detach removed the pins");
    assert!(!paths.mode_file().exists(), "detach removed the attach mode file");
    let refused = http_get(client_addr(0), SocketAddrV4::new(NAT_VIP, 80), "/");
    assert!(refused.is_err(), "after detach the VIP is no longer served");
    println!("reload kept the connection (flow hits {hits}); detach removed the balancer");
}

/// GET / from `src` (a fixed port, reused) to `dst` on a keep-alive connection the client
/// closes first (so the backend holds no TIME_WAIT on the 4-tuple); returns the body.
fn get_from_port(src: SocketAddrV4, dst: SocketAddrV4) -> std::io::Result<String> {
    use std::io::{BufRead, BufReader, Read, Write};
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&SocketAddr::V4(src).into())?;
    socket.set_read_timeout(Some(Duration::from_secs(5)))?;
    socket.connect_timeout(&SocketAddr::V4(dst).into(), Duration::from_secs(5))?;
    let mut stream: std::net::TcpStream = socket.into();
    stream.write_all(format!("GET / HTTP/1.1\r\nHost: {dst}\r\n\r\n").as_bytes())?;
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = n.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(String::from_utf8_lossy(&body).trim().to_string())
}

/// A client that reaches a NAT backend both through the VIP and straight across the balancer
/// (its router), from the same port: the direct connection's replies are not the VIP's. They
/// used to be rewritten with the VIP's address by the reply entry the VIP connection left (or,
/// without one, as its backend's one VIP's replies), so the direct connection never opened.
#[test]
fn a_direct_connection_to_a_nat_backend_is_left_alone() {
    if !require_root("a_direct_connection_to_a_nat_backend_is_left_alone") {
        return;
    }
    let backend_bin = env!("CARGO_BIN_EXE_lb-test-backend");
    let mut lab = Lab::new("dr", 1, 1);
    let ns = lab.backends[0].name.clone();
    lab.spawn(&ns, &[backend_bin, "0.0.0.0:8080", "backend-0"]);
    lab.pass_on_switch_port(LB_PORT);
    lab.client.exec(&["ip", "route", "add", "198.51.100.0/24", "via", lb_tests::lab::LB_CLIENT_SIDE]);
    let mut dp = attach_ingress(&lab.lb, RING, 1024).unwrap();
    configure(
        &mut dp,
        RING,
        &[VipSpec {
            id: 0,
            addr: NAT_VIP,
            port: 80,
            protocol: ip_proto::TCP,
            forwarding: forwarding::NAT,
            hash: hash_mode::FLOW,
            encap_source: Ipv4Addr::new(198, 51, 100, 1),
            backends: vec![(0, backend_addr(0), 8080, 100)],
        }],
    );
    lab.resolve_backends();
    let backend = SocketAddrV4::new(backend_addr(0), 8080);
    {
        let _in = lab.backends[0].enter();
        wait_for_listener(SocketAddr::V4(backend), Duration::from_secs(10));
    }
    let _in = lab.client.enter();
    // Straight to the backend first (no reply entry yet: the backend's one-VIP fallback),
    // then through the VIP, then straight again from the VIP connection's port.
    let (first, vip_port) = (SocketAddrV4::new(client_addr(0), 40555), SocketAddrV4::new(client_addr(0), 40556));
    assert_eq!(get_from_port(first, backend).expect("direct, before any VIP connection"), "backend-0");
    assert_eq!(get_from_port(vip_port, SocketAddrV4::new(NAT_VIP, 80)).expect("through the VIP"), "backend-0");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(get_from_port(vip_port, backend).expect("direct, on the VIP connection's port"), "backend-0");
    assert_eq!(counter(&dp, Counter::DirectToBackend), 2);
    assert!(counter(&dp, Counter::NatReply) > 0, "the VIP connection's replies were rewritten");
}

/// A NAT UDP VIP whose backend has nothing listening: the backend's ICMP "port unreachable"
/// reaches the client from the VIP, quoting the datagram as the client sent it, so the client's
/// socket (connected to the VIP) learns at once that the service is down, as it would from the
/// service itself. Passed on naming the backend, the client's stack would not match it to the
/// socket, and the client would wait out its timeout.
#[test]
fn a_nat_udp_backends_port_unreachable_reaches_the_client() {
    if !require_root("a_nat_udp_backends_port_unreachable_reaches_the_client") {
        return;
    }
    let mut lab = Lab::new("pu", 1, 1);
    lab.pass_on_switch_port(LB_PORT);
    let mut dp = attach_ingress(&lab.lb, RING, 1024).unwrap();
    configure(
        &mut dp,
        RING,
        &[VipSpec {
            id: 0,
            addr: NAT_VIP,
            port: 53,
            protocol: ip_proto::UDP,
            forwarding: forwarding::NAT,
            hash: hash_mode::FLOW,
            encap_source: Ipv4Addr::new(198, 51, 100, 1),
            // Nothing listens on the backend's port 5353.
            backends: vec![(0, backend_addr(0), 5353, 100)],
        }],
    );
    lab.resolve_backends();
    let _in = lab.client.enter();
    udp_refused(SocketAddr::from((client_addr(0), 0)), SocketAddr::from((NAT_VIP, 53)));
    assert!(counter(&dp, Counter::IcmpToClient) > 0, "the error was not rewritten by the balancer");
}
