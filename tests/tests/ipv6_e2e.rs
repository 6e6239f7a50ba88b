//! IPv6 end to end through the real daemon: `lb-ctl attach eth0` with IPv6 VIPs in lb.toml, a
//! namespace lab with IPv6 next to IPv4, and real HTTP from the client namespace. Every
//! forwarding mode: NAT66; DSR as IPv6 in IPv6, over GUE, by MAC rewrite; and an IPv4 VIP
//! whose backends are reached over IPv6 (IPv4 in IPv6). The DSR backends decapsulate with
//! `lb-ctl decap attach --from` the balancer's IPv6 address. Each mode spreads clients over
//! both backends, moves a 2 MiB response and a 1 MiB upload byte-exact (the upload's full-size
//! segments only fit once the balancer's ICMPv6 "packet too big" shrank the client's path MTU),
//! and is counted by the daemon. A NAT66 UDP VIP whose backend has nothing listening: the
//! backend's ICMPv6 port unreachable refuses the client's socket. Needs root.
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use lb_ctl::state::Health;
use lb_tests::lab::{
    Daemon, LB_BACKEND_SIDE6, LB_PORT, Lab, backend_addr6, client_addr, client_addr6, http_get, http_post,
    pattern_byte, spread, udp_refused, wait_for_listener,
};
use lb_tests::privileges::require_root;

const CLIENTS: usize = 8;
const LARGE: usize = 2 * 1024 * 1024 + 12345;
const UPLOAD: usize = 1024 * 1024;

const NAT_VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x10);
const IPIP_VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x20);
const L2_VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x21);
const GUE_VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x22);
/// An IPv4 VIP whose backends are reached over IPv6 (IPv4 in IPv6).
const V4_OVER_V6_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 30);

fn vip_table(name: &str, address: IpAddr, forwarding: &str, port: u16) -> String {
    let encap = if forwarding.starts_with("dsr-") && forwarding != "dsr-l2" {
        format!("encap_source = \"{LB_BACKEND_SIDE6}\"\n")
    } else {
        String::new()
    };
    let backends: Vec<String> =
        (0..2).map(|i| format!("  {{ address = \"{}\", port = {port} }},", backend_addr6(i))).collect();
    format!(
        "[[vip]]\nname = \"{name}\"\naddress = \"{address}\"\nport = 80\nforwarding = \"{forwarding}\"\n{encap}\
         health = {{ kind = \"http\", path = \"/health\", interval = \"200ms\", timeout = \"150ms\", rise = 1, fall = 3 }}\n\
         backends = [\n{}\n]\n\n",
        backends.join("\n")
    )
}

fn counters(daemon: &Daemon) -> HashMap<String, u64> {
    let stats: lb_ctl::api::types::StatsView =
        serde_json::from_str(&daemon.ok(&["stats", "--json"])).expect("stats --json");
    stats.counters.into_iter().map(|c| (c.name, c.value)).collect()
}

#[test]
fn http_through_ipv6_vips_in_every_mode() {
    if !require_root("http_through_ipv6_vips_in_every_mode") {
        return;
    }
    let backend_bin = env!("CARGO_BIN_EXE_lb-test-backend");
    let lb_ctl = lb_tests::lb_ctl_bin();
    let mut lab = Lab::new("v6", 2, CLIENTS);
    lab.enable_ipv6(CLIENTS);

    /// Takes the decapsulators off when the test ends, also by panic.
    struct DecapPins(Vec<lb_ctl::paths::AttachPaths>);
    impl Drop for DecapPins {
        fn drop(&mut self) {
            for paths in &self.0 {
                let _ = lb_ctl::dataplane::attach::detach_decap_at(paths);
            }
        }
    }
    let mut pins = DecapPins(Vec::new());
    for i in 0..2 {
        let name = format!("backend-{i}");
        let ns = lab.backends[i].name.clone();
        for vip in [IPIP_VIP, L2_VIP, GUE_VIP] {
            lab.backends[i].exec(&["ip", "-6", "addr", "add", &format!("{vip}/128"), "dev", "lo", "nodad"]);
        }
        lab.backends[i].exec(&["ip", "addr", "add", &format!("{V4_OVER_V6_VIP}/32"), "dev", "lo"]);
        lab.spawn(&ns, &[backend_bin, "[::]:8080", &name]);
        lab.spawn(&ns, &[backend_bin, "[::]:80", &name]);
        // The product command, with the balancer's IPv6 address as the allowed outer source.
        lb_tests::netns::sh(&[
            "nsenter",
            &format!("--net=/run/netns/{ns}"),
            lb_ctl.to_str().unwrap(),
            "decap",
            "attach",
            "eth0",
            "--from",
            &LB_BACKEND_SIDE6.to_string(),
            "--xdp-mode",
            "native",
        ]);
        let _in = lab.backends[i].enter();
        pins.0.push(lb_ctl::paths::AttachPaths::decap("eth0"));
        wait_for_listener(SocketAddr::from((backend_addr6(i), 8080)), Duration::from_secs(10));
        wait_for_listener(SocketAddr::from((backend_addr6(i), 80)), Duration::from_secs(10));
    }
    lab.pass_on_switch_port(LB_PORT);
    lab.resolve_backends6();

    let mut daemon = Daemon::new(&lab.lb, "eth0", "v6d", &["--xdp-mode", "native"]);
    let config = format!(
        "[daemon]\napi_socket = \"{}\"\nflow_table_size = 65536\n\n{}{}{}{}{}",
        daemon.socket().display(),
        vip_table("nat66", NAT_VIP.into(), "nat", 8080),
        vip_table("ip6ip6", IPIP_VIP.into(), "dsr-ipip", 80),
        vip_table("l2", L2_VIP.into(), "dsr-l2", 80),
        vip_table("gue6", GUE_VIP.into(), "dsr-gue", 80),
        vip_table("v4-over-v6", V4_OVER_V6_VIP.into(), "dsr-ipip", 80),
    );
    // A NAT66 UDP VIP whose one backend has nothing listening on its port: its ICMPv6 "port
    // unreachable" must reach the client as if from the VIP.
    let config = format!(
        "{config}[[vip]]\nname = \"dns6\"\naddress = \"{NAT_VIP}\"\nport = 53\nprotocol = \"udp\"\n\
         backends = [ {{ address = \"{}\", port = 5353 }} ]\n",
        backend_addr6(0)
    );
    daemon.write_config_text(&config);
    let validated =
        lb_tests::netns::sh(&[lb_ctl.to_str().unwrap(), "validate", "-c", daemon.config().to_str().unwrap()]);
    println!("{}", String::from_utf8_lossy(&validated.stdout).trim());
    daemon.start();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let backends = daemon.backends();
        // dns6 has no health check: its backend is in the ring unchecked.
        let ready =
            |b: &lb_ctl::api::types::BackendView| b.in_ring && matches!(b.health, Health::Up | Health::Unchecked);
        if backends.len() == 11 && backends.iter().all(ready) {
            break;
        }
        assert!(Instant::now() < deadline, "backends not all up: {backends:?}\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let listed = daemon.ok(&["backends", "list"]);
    assert!(listed.contains(&format!("[{}]:8080", backend_addr6(0))), "IPv6 backends print as [ADDR]:PORT:\n{listed}");

    let clients6: Vec<IpAddr> = (0..CLIENTS).map(|i| IpAddr::V6(client_addr6(i))).collect();
    let clients4: Vec<IpAddr> = (0..CLIENTS).map(|i| IpAddr::V4(client_addr(i))).collect();
    let _in = lab.client.enter();
    let before = counters(&daemon);
    for (mode, vip, clients) in [
        ("nat66", IpAddr::V6(NAT_VIP), &clients6),
        ("ip6ip6", IpAddr::V6(IPIP_VIP), &clients6),
        ("dsr-l2", IpAddr::V6(L2_VIP), &clients6),
        ("gue6", IpAddr::V6(GUE_VIP), &clients6),
        ("v4-over-v6", IpAddr::V4(V4_OVER_V6_VIP), &clients4),
    ] {
        let vip = SocketAddr::new(vip, 80);
        let seen = spread(clients, vip);
        let names: HashSet<&String> = seen.values().collect();
        println!("{mode}: {} clients spread over {names:?}", clients.len());
        assert_eq!(names.len(), 2, "{mode}: clients must reach both backends");
        let (status, body) = http_get(clients[0], vip, &format!("/bytes/{LARGE}")).unwrap();
        assert_eq!((status, body.len()), (200, LARGE), "{mode}: the large response");
        let first_bad = body.iter().enumerate().position(|(i, b)| *b != pattern_byte(i));
        assert_eq!(first_bad, None, "{mode}: large response differs at byte {first_bad:?}");
        let upload: Vec<u8> = (0..UPLOAD).map(|i| (i % 241) as u8).collect();
        let (status, answer) =
            http_post(clients[1], vip, "/upload", &upload).unwrap_or_else(|e| panic!("{mode}: upload: {e}"));
        let sum: u64 = upload.iter().map(|b| *b as u64).sum();
        assert_eq!(
            (status, String::from_utf8_lossy(&answer).trim()),
            (200, format!("received {UPLOAD} sum {sum}").as_str()),
            "{mode}: upload"
        );
        println!("{mode}: {LARGE}-byte response and {UPLOAD}-byte upload byte-exact");
    }
    udp_refused(SocketAddr::new(clients6[0], 0), SocketAddr::new(IpAddr::V6(NAT_VIP), 53));
    println!("dns6: the backend's port unreachable refused the client's socket");
    drop(_in);
    let after = counters(&daemon);
    let rose = |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
    println!(
        "nat_reply {}, forward_tx {}, forward_icmp_too_big {}, pass_jump_failed {}",
        rose("nat_reply"),
        rose("forward_tx"),
        rose("forward_icmp_too_big"),
        rose("pass_jump_failed")
    );
    assert!(rose("nat_reply") > 700, "NAT66 replies rewritten by XDP: {}", rose("nat_reply"));
    assert!(rose("forward_icmp_too_big") > 0, "the DSR uploads needed ICMPv6 packet-too-big answers");
    assert_eq!(rose("pass_jump_failed"), 0, "every IPv6 frame reached its program");
    assert!(rose("icmp_to_client") > 0, "the backend's port unreachable was rewritten by XDP");
    let vips = daemon.ok(&["vips", "list"]);
    assert!(vips.contains(&format!("[{NAT_VIP}]:80")), "IPv6 VIPs print as [ADDR]:PORT:\n{vips}");

    // `backends verify` from the balancer: every backend of every VIP passes, directly and
    // along the data plane's path ...
    for vip in ["nat66", "ip6ip6", "l2", "gue6", "v4-over-v6"] {
        let out = daemon.ctl_on_balancer(&["backends", "verify", vip]);
        let text = String::from_utf8_lossy(&out.stdout);
        println!("backends verify {vip}:\n{text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "verify {vip}: every backend passes");
        assert_eq!(text.matches(" ok\n").count(), 2, "verify {vip}: two backends, both ok:\n{text}");
    }
    // ... and a backend that lost the VIP from lo still passes its health checks, but verify
    // names it and says why.
    lab.backends[1].exec(&["ip", "-6", "addr", "del", &format!("{IPIP_VIP}/128"), "dev", "lo"]);
    let out = daemon.ctl_on_balancer(&["backends", "verify", "ip6ip6", "--timeout", "500ms"]);
    let text = String::from_utf8_lossy(&out.stdout);
    println!("backends verify ip6ip6, backend-1 without the VIP:\n{text}");
    assert_eq!(out.status.code(), Some(1), "verify fails when a backend fails");
    let broken = text.lines().find(|l| l.contains(&backend_addr6(1).to_string())).expect("backend-1's line");
    assert!(
        broken.contains("FAILED") && broken.contains(&format!("On the backend: the VIP {IPIP_VIP} on lo")),
        "backend-1 is named with the fix: {broken}"
    );
    let fine = text.lines().find(|l| l.contains(&backend_addr6(0).to_string())).expect("backend-0's line");
    assert!(fine.trim_end().ends_with(" ok"), "backend-0 still passes: {fine}");
    let health = daemon.backends();
    assert!(
        health.iter().filter(|b| b.vip == "ip6ip6").all(|b| b.health == Health::Up),
        "health checks alone do not see it: {health:?}"
    );
}
