//! The control API end to end: a daemon over an in-memory data plane, on a temp-dir socket.
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use hyper::Method;
use lb_common::flow::{FlowEntry, FlowKey};
use lb_common::hash::{client_hash, flow_hash};
use lb_common::ipv4_bytes;

use super::server::bind_unix;
use super::types::*;
use crate::state::{Health, Origin};
use crate::testing::rig::{Daemon, RING, lb_toml, refused, socket_path};

#[tokio::test]
async fn socket_is_private_and_owned() {
    let d = Daemon::start(&lb_toml("")).await;
    let socket = socket_path(d.dir.path());
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(socket.parent().unwrap()).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700);
    // A second daemon may not take over a live socket.
    let e = bind_unix(&socket).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    let dir = d.stop().await;
    assert!(!socket.exists(), "a clean stop removes the socket");
    // A stale socket file (dead daemon) is replaced.
    std::os::unix::net::UnixListener::bind(&socket).unwrap();
    drop(bind_unix(&socket).unwrap());
    // Right after a kill -9 the dead daemon's socket may still accept connections; it holds
    // no lock any more, so a restart takes the socket over instead of failing.
    let dying = std::os::unix::net::UnixListener::bind(socket.with_extension("old")).unwrap();
    std::fs::rename(socket.with_extension("old"), &socket).unwrap();
    assert!(std::os::unix::net::UnixStream::connect(&socket).is_ok(), "the old socket still accepts");
    let restarted = bind_unix(&socket).unwrap();
    assert!(bind_unix(&socket).is_err(), "while the new daemon lives, its socket is its own");
    drop((restarted, dying, dir));
}

#[tokio::test]
async fn status_vips_and_list() {
    let d = Daemon::start(&lb_toml("")).await;
    let status = d.client.status().await.unwrap();
    assert_eq!((status.interface.as_str(), status.vips, status.backends, status.backends_up), ("test0", 2, 3, 3));
    assert_eq!(status.ring_size, RING);
    let vips = d.client.vips().await.unwrap();
    assert_eq!(vips.iter().map(|v| v.name.clone().unwrap()).collect::<Vec<_>>(), ["web", "dns"]);
    assert_eq!((vips[1].protocol.as_str(), vips[1].hash.as_str(), vips[1].healthy), ("udp", "flow", 1));
    let list = d.list().await;
    assert_eq!(list.len(), 3);
    assert_eq!(
        (list[1].address.to_string().as_str(), list[1].weight, list[1].health),
        ("198.51.100.2:8080", 50, Health::Unchecked)
    );
    assert!(list.iter().all(|b| b.in_ring && b.state == "active" && b.origin == Origin::Config));
    // Filtered by VIP, by name or address.
    assert_eq!(d.client.backends(Some("dns")).await.unwrap().len(), 1);
    assert_eq!(d.client.backends(Some("203.0.113.10:80")).await.unwrap().len(), 2);
    // Traffic and flows come from the data plane.
    let id = list[0].id;
    d.fake.lock().fake.backend_traffic.insert(id, lb_common::stats::Traffic { packets: 5, bytes: 700 });
    let generation = d.fake.lock().fake.backends[&id].generation;
    d.fake
        .lock()
        .fake
        .flows
        .insert(FlowKey::default(), FlowEntry { backend_id: id, vip_id: 0, generation, reply_hash: 0 });
    let b = d.list().await.into_iter().find(|b| b.id == id).unwrap();
    assert_eq!((b.packets, b.bytes, b.active_flows), (5, 700, 1));
    let stats = d.client.stats().await.unwrap();
    assert!(stats.counters.iter().any(|c| c.name == "flow_new"));
    assert!(stats.backends.iter().any(|t| t.name == "web 198.51.100.1:8080" && t.packets == 5));
    d.stop().await;
}

#[tokio::test]
async fn add_drain_remove_change_the_maps() {
    let d = Daemon::start(&lb_toml("")).await;
    let web = d.client.vips().await.unwrap()[0].id;
    let added = d.client.add_backend(&d.req("web", "198.51.100.9:8080", Some(10))).await.unwrap();
    assert_eq!(added.message, "web: backend 198.51.100.9:8080 added");
    {
        let g = d.fake.lock();
        assert!(g.fake.backends[&added.backend_id].is_active());
        assert!(g.fake.rings[&web].contains(&added.backend_id));
    }
    let b = d.list().await.into_iter().find(|b| b.id == added.backend_id).unwrap();
    assert_eq!((b.weight, b.origin), (10, Origin::Api));

    let drained = d.client.drain_backend(&d.req("web", "198.51.100.1:8080", None)).await.unwrap();
    {
        let g = d.fake.lock();
        assert!(g.fake.backends[&drained.backend_id].is_active(), "established flows stay");
        assert!(!g.fake.rings[&web].contains(&drained.backend_id), "no new flows");
    }
    let b = d.list().await.into_iter().find(|b| b.id == drained.backend_id).unwrap();
    assert_eq!((b.state.as_str(), b.in_ring), ("draining", false));

    let removed = d.client.remove_backend(&d.req("203.0.113.10:80", "198.51.100.9:8080", None)).await.unwrap();
    assert_eq!(removed.backend_id, added.backend_id);
    {
        let g = d.fake.lock();
        assert!(!g.fake.backends[&removed.backend_id].is_active());
        assert!(!g.fake.rings[&web].contains(&removed.backend_id));
    }
    assert_eq!(d.list().await.len(), 3);
    d.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_and_change_nothing() {
    let d = Daemon::start(&lb_toml("")).await;
    let before = (d.fake.snapshot(), d.list().await);
    let c = &d.client;
    type Case<'a> = ((u16, String), (u16, &'a str));
    let cases: Vec<Case<'_>> = vec![
        (refused(c.add_backend(&d.req("nope", "198.51.100.9:8080", None)).await), (404, "unknown VIP \"nope\"")),
        (
            refused(c.add_backend(&d.req("web", "198.51.100.1:8080", None)).await),
            (409, "VIP \"web\" already has backend 198.51.100.1:8080"),
        ),
        (
            refused(c.add_backend(&d.req("web", "198.51.100.300:8080", None)).await),
            (400, "malformed address \"198.51.100.300:8080\": expected ADDR:PORT or ADDR (IPv6 as [ADDR]:PORT)"),
        ),
        (
            refused(c.add_backend(&d.req("web", "198.51.100.9:8080", Some(70000))).await),
            (400, "VIP \"web\": weight 70000 is out of range (0-65535)"),
        ),
        (
            refused(c.remove_backend(&d.req("web", "198.51.100.9:8080", None)).await),
            (404, "VIP \"web\" has no backend 198.51.100.9:8080"),
        ),
        (
            refused(c.drain_backend(&d.req("203.0.113.99", "198.51.100.1", None)).await),
            (404, "unknown VIP \"203.0.113.99\""),
        ),
        (refused(c.backends(Some("nope")).await), (404, "unknown VIP \"nope\"")),
        (
            refused(c.explain(&ExplainRequest { vip: "web".into(), client: "somewhere".into(), quic_cid: None }).await),
            (400, "malformed client address \"somewhere\": expected ADDR or ADDR:PORT (IPv6 as [ADDR]:PORT)"),
        ),
        (
            refused(c.explain(&ExplainRequest { vip: "dns".into(), client: "192.0.2.1".into(), quic_cid: None }).await),
            (400, "VIP \"dns\" hashes the 5-tuple (hash = \"flow\"): give the client as ADDR:PORT"),
        ),
        (
            refused(c.call::<_, Changed>(Method::POST, "/backends", Some(&serde_json::json!({"vip": "web"}))).await),
            (400, "invalid request body: missing field `address` at line 1 column 13"),
        ),
        (
            refused(
                c.call::<_, Changed>(
                    Method::POST,
                    "/backends",
                    Some(&serde_json::json!({"vip": "web", "address": "198.51.100.9:1", "wieght": 3})),
                )
                .await,
            ),
            (
                400,
                "invalid request body: unknown field `wieght`, expected one of `vip`, `address`, `weight` at line 1 column 48",
            ),
        ),
        (
            refused(c.call::<(), Changed>(Method::DELETE, "/backends", None).await),
            (405, "/v1/backends takes POST, not DELETE"),
        ),
        (refused(c.call::<(), Changed>(Method::GET, "/nothing", None).await), (404, "no such endpoint: /v1/nothing")),
        (
            {
                let (status, body) = c.raw::<()>(Method::GET, "/status", None).await.unwrap();
                (status, serde_json::from_slice::<ErrorBody>(&body).unwrap().error)
            },
            (404, "no such endpoint: /status (the API lives under /v1/)"),
        ),
    ];
    for (got, (status, message)) in cases {
        assert_eq!(got, (status, message.to_string()));
    }
    assert_eq!((d.fake.snapshot(), d.list().await), before);
    d.stop().await;
}

#[tokio::test]
async fn explain_follows_the_kernel_hash_and_the_connection_table() {
    let d = Daemon::start(&lb_toml("")).await;
    let vips = d.client.vips().await.unwrap();
    let (web, dns) = (vips[0].id, vips[1].id);
    // hash = "ip": the client address alone, seed 7, slot = hash % ring size.
    let client = [192, 0, 2, 33];
    let hash = client_hash(&ipv4_bytes(client), 7);
    let slot = hash % RING;
    let expected = d.fake.lock().fake.rings[&web][slot as usize];
    let e = d
        .client
        .explain(&ExplainRequest { vip: "web".into(), client: "192.0.2.33".into(), quic_cid: None })
        .await
        .unwrap();
    assert_eq!((e.decision, e.hash, e.slot, e.backend_id), (Decision::Ring, Some(hash), Some(slot), Some(expected)));
    let addr = d.list().await.into_iter().find(|b| b.id == expected).unwrap().address;
    assert_eq!(e.backend, Some(addr));
    assert_eq!(
        e.reason,
        format!(
            "ring slot {slot} of {RING} (hash of the client address {hash:#010x}) holds backend {addr} (id {expected})"
        )
    );
    // With a port: the connection table is checked first.
    let e = d
        .client
        .explain(&ExplainRequest { vip: "web".into(), client: "192.0.2.33:40000".into(), quic_cid: None })
        .await
        .unwrap();
    assert_eq!(e.decision, Decision::Ring);
    assert!(e.reason.starts_with("not in the connection table: a new flow; ring slot"), "{}", e.reason);
    let other = d.list().await.into_iter().find(|b| b.id != expected && b.vip == "web").unwrap();
    let key = FlowKey::new(ipv4_bytes(client), ipv4_bytes([203, 0, 113, 10]), 40000u16.to_be(), 80u16.to_be(), 6, 4);
    let generation = d.fake.lock().fake.backends[&other.id].generation;
    d.fake.lock().fake.flows.insert(key, FlowEntry { backend_id: other.id, vip_id: web, generation, reply_hash: 0 });
    let e = d
        .client
        .explain(&ExplainRequest { vip: "web".into(), client: "192.0.2.33:40000".into(), quic_cid: None })
        .await
        .unwrap();
    assert_eq!((e.decision, e.backend), (Decision::Conntrack, Some(other.address)));
    assert_eq!(
        e.reason,
        format!("connection-table hit: this flow is pinned to backend {} (id {})", other.address, other.id)
    );
    // hash = "flow": the 5-tuple, ports in network order as the program reads them.
    let hash = flow_hash(&ipv4_bytes(client), &ipv4_bytes([203, 0, 113, 11]), 5353u16.to_be(), 53u16.to_be(), 17, 7);
    let e = d
        .client
        .explain(&ExplainRequest { vip: "dns".into(), client: "192.0.2.33:5353".into(), quic_cid: None })
        .await
        .unwrap();
    assert_eq!((e.hash, e.slot), (Some(hash), Some(hash % RING)));
    assert_eq!(e.backend_id, Some(d.fake.lock().fake.rings[&dns][(hash % RING) as usize]));
    d.stop().await;
}

/// A service that answers every request with an empty VIP list.
#[derive(Clone)]
struct Empty;

impl super::Service for Empty {
    async fn call(&self, _: super::Request) -> Result<super::Response, super::ApiError> {
        Ok(super::Response::Vips(Vec::new()))
    }
}

/// Clients that send half a request and wait (slowloris) cannot hold the daemon's file
/// descriptors: a header must arrive within the timeout, and at the cap a new connection
/// closes the oldest idle one at once. The API still answers afterwards.
#[tokio::test]
async fn half_sent_requests_time_out_and_connections_are_capped() {
    use std::io::{Read as _, Write as _};
    use std::os::unix::net::UnixStream;
    let dir = tempfile::tempdir().unwrap();
    let socket = socket_path(dir.path());
    let control = bind_unix(&socket).unwrap();
    let limits = super::server::Limits { header_timeout: Duration::from_secs(2), max_connections: 4 };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(super::server::serve(Empty, control.listener, None, limits, async {
        let _ = stopped.await;
    }));
    let half = |socket: &std::path::Path| {
        let mut s = UnixStream::connect(socket).unwrap();
        // The server may already have closed a connection over the cap: the write may fail.
        let _ = s.write_all(b"GET /v1/vips HTTP/1.1\r\nHost: x\r\n");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let socket2 = socket.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let mut held: Vec<UnixStream> = (0..4).map(|_| half(&socket2)).collect();
        std::thread::sleep(Duration::from_millis(50));
        let started = std::time::Instant::now();
        held.push(half(&socket2));
        let mut buf = [0u8; 64];
        assert_eq!(held[0].read(&mut buf).unwrap_or(0), 0, "the oldest idle connection is closed for the fifth");
        assert!(started.elapsed() < Duration::from_millis(1500), "closed at once, not by the header timeout");
        for s in &mut held[1..] {
            let n = s.read(&mut buf).unwrap_or(0);
            assert!(!String::from_utf8_lossy(&buf[..n]).contains("200 OK"), "a half request is not served");
        }
        assert!(started.elapsed() < Duration::from_secs(8), "half requests are closed by the header timeout");
    });
    checked.await.unwrap();
    let client = super::client::Client::new(&socket);
    assert_eq!(client.vips().await.unwrap(), Vec::new(), "the API still answers");
    stop.send(()).unwrap();
    server.await.unwrap();
}

/// A client that holds every connection the API allows, idle, and reopens each one the daemon
/// closes (a leaking script) cannot lock anyone out: every other client's connection takes
/// the place of the hog's oldest one, and is answered.
#[tokio::test]
async fn a_connection_hog_cannot_lock_the_operator_out() {
    use std::io::Read as _;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicBool, Ordering};
    const CAP: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let socket = socket_path(dir.path());
    let control = bind_unix(&socket).unwrap();
    let limits = super::server::Limits { header_timeout: Duration::from_secs(30), max_connections: CAP };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(super::server::serve(Empty, control.listener, None, limits, async {
        let _ = stopped.await;
    }));
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let (hog_done, hog_socket) = (done.clone(), socket.clone());
    let hog = tokio::task::spawn_blocking(move || {
        let open = || {
            let s = UnixStream::connect(&hog_socket).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        };
        let mut held: Vec<UnixStream> = (0..CAP).map(|_| open()).collect();
        let mut reopened = 0;
        let started = std::time::Instant::now();
        while !hog_done.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(20) {
            for s in held.iter_mut() {
                if matches!(s.read(&mut [0u8; 16]), Ok(0)) {
                    *s = open();
                    reopened += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        reopened
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = super::client::Client::new(&socket);
    for probe in 0..20 {
        let answer = tokio::time::timeout(Duration::from_secs(5), client.vips()).await;
        assert!(matches!(answer, Ok(Ok(_))), "probe {probe} got {answer:?}");
    }
    done.store(true, Ordering::Relaxed);
    let reopened = hog.await.unwrap();
    // A probe that found the cap free (the hog had not yet reopened) closed nothing; the
    // others each closed one of the hog's.
    assert!(reopened >= 1, "probes took the place of the hog's connections: {reopened} reopened");
    stop.send(()).unwrap();
    server.await.unwrap();
}

/// `/v1/metrics` is OpenMetrics text a Prometheus server can scrape: every sample line is
/// `name{labels} value`, it ends with `# EOF`, and the figures are those of `backends list`
/// and `stats`.
#[tokio::test]
async fn metrics_are_openmetrics_and_agree_with_the_list() {
    let d = Daemon::start(&lb_toml("")).await;
    let first = d.list().await[0].clone();
    d.fake.lock().fake.backend_traffic.insert(first.id, lb_common::stats::Traffic { packets: 42, bytes: 4200 });
    let (status, body) = d.client.raw::<()>(Method::GET, "/v1/metrics", None).await.unwrap();
    assert_eq!(status, 200);
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    let mut samples = std::collections::HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line:?}"));
        let name_ok = series.split('{').next().unwrap().chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        assert!(name_ok && series.starts_with("lb_"), "metric name: {line:?}");
        assert!(!series.contains('{') || series.ends_with('}'), "labels: {line:?}");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line:?}"));
        samples.insert(series.to_string(), value);
    }
    let backend = |name: &str, b: &BackendView| format!("{name}{{vip=\"{}\",backend=\"{}\"}}", b.vip, b.address);
    assert_eq!(samples[&backend("lb_backend_packets_total", &first)], 42.0);
    assert_eq!(samples[&backend("lb_backend_bytes_total", &first)], 4200.0);
    for b in d.list().await {
        let up = matches!(b.health, Health::Up | Health::Unchecked);
        assert_eq!(samples[&backend("lb_backend_up", &b)], f64::from(u8::from(up)), "{b:?}");
        assert_eq!(samples[&backend("lb_backend_in_ring", &b)], f64::from(u8::from(b.in_ring)));
    }
    for c in d.client.stats().await.unwrap().counters {
        let series = format!("lb_dataplane_packets_total{{verdict=\"{}\"}}", c.name);
        assert_eq!(samples.get(&series), Some(&(c.value as f64)), "{series}");
    }
    assert!(samples.contains_key("lb_daemon_uptime_seconds"));
    assert_eq!(samples["lb_daemon_reloads_total{result=\"ok\"}"], 0.0);
    d.stop().await;
}

/// The metrics port serves `/metrics` and nothing of the control API.
#[tokio::test]
async fn the_metrics_port_serves_metrics_only() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let d = Daemon::start(&lb_toml("")).await;
    let get = |path: &'static str| d.metrics_get(path);
    let metrics = get("/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("lb_backend_up{") && metrics.ends_with("# EOF\n"), "{metrics}");
    for path in ["/v1/status", "/v1/backends", "/v1/metrics"] {
        let answer = get(path).await;
        assert!(answer.starts_with("HTTP/1.1 404"), "{path}: {answer}");
    }
    let post = {
        let mut s = tokio::net::TcpStream::connect(d.metrics).await.unwrap();
        s.write_all(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    d.stop().await;
}

/// An IPv6 NAT VIP, and an IPv4 VIP whose encapsulation runs over IPv6 (`encap_source`).
const IPV6_VIPS: &str = r#"
[[vip]]
name = "web6"
address = "2001:db8::10"
port = 80
backends = [ { address = "2001:db8::11", port = 8080 }, { address = "2001:db8::12", port = 8080 } ]

[[vip]]
name = "tun6"
address = "203.0.113.12"
port = 443
forwarding = "dsr-ipip"
encap_source = "2001:db8::fe"
backends = [ { address = "2001:db8::21" } ]
"#;

fn v6(text: &str) -> [u8; 16] {
    text.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

#[tokio::test]
async fn ipv6_vips_write_family_6_and_16_byte_addresses() {
    use lb_common::family;
    use lb_common::vip::VipKey;
    let d = Daemon::start(&lb_toml(IPV6_VIPS)).await;
    let vips = d.client.vips().await.unwrap();
    let (web6, tun6) = (vips[2].id, vips[3].id);
    let list = d.list().await;
    let web6_backends: Vec<_> = list.iter().filter(|b| b.vip == "web6").collect();
    assert_eq!(
        web6_backends.iter().map(|b| b.address.to_string()).collect::<Vec<_>>(),
        ["[2001:db8::11]:8080", "[2001:db8::12]:8080"]
    );
    {
        let g = d.fake.lock();
        let key = VipKey { addr: v6("2001:db8::10"), port: 80u16.to_be(), protocol: 6, family: family::IPV6 };
        let info = g.fake.vips.get(&key).expect("the IPv6 VIP's entry, keyed by its 16 bytes and family 6");
        assert_eq!((info.id, info.key), (web6, key));
        for b in &web6_backends {
            let entry = &g.fake.backends[&b.id];
            let std::net::IpAddr::V6(ip) = b.address.ip() else { panic!("{}", b.address) };
            assert_eq!((entry.addr, entry.port, entry.family), (ip.octets(), 8080u16.to_be(), family::IPV6));
            let nat = VipKey { addr: ip.octets(), port: 8080u16.to_be(), protocol: 6, family: family::IPV6 };
            assert_eq!(g.fake.nat_backends.get(&nat), Some(&web6));
            assert!(g.fake.rings[&web6].contains(&b.id));
        }
        // The IPv4 VIP over IPv6: family 4 key, IPv6 outer source and backends.
        let key =
            VipKey { addr: ipv4_bytes([203, 0, 113, 12]), port: 443u16.to_be(), protocol: 6, family: family::IPV4 };
        let info = &g.fake.vips[&key];
        assert_eq!(
            (info.id, info.forwarding, info.encap_source),
            (tun6, lb_common::vip::forwarding::DSR_IPIP, v6("2001:db8::fe"))
        );
        let b = list.iter().find(|b| b.vip == "tun6").unwrap();
        assert_eq!((g.fake.backends[&b.id].addr, g.fake.backends[&b.id].family), (v6("2001:db8::21"), family::IPV6));
    }
    // An IPv6 VIP is named by its address too, bare or as [ADDR]:PORT[/PROTOCOL].
    for reference in ["2001:db8::10", "[2001:db8::10]:80", "[2001:db8::10]:80/tcp"] {
        assert_eq!(d.client.backends(Some(reference)).await.unwrap().len(), 2, "{reference}");
    }
    // Added through the API: the same form.
    let added = d.client.add_backend(&d.req("[2001:db8::10]:80", "[2001:db8::13]:8080", None)).await.unwrap();
    let entry = d.fake.lock().fake.backends[&added.backend_id];
    assert_eq!((entry.addr, entry.family), (v6("2001:db8::13"), family::IPV6));
    d.stop().await;
}

#[tokio::test]
async fn wrong_family_backends_are_refused_and_change_nothing() {
    let d = Daemon::start(&lb_toml(IPV6_VIPS)).await;
    let before = (d.fake.snapshot(), d.list().await);
    let c = &d.client;
    let cases = [
        (
            refused(c.add_backend(&d.req("web6", "198.51.100.9:8080", None)).await),
            "VIP \"web6\": backend 198.51.100.9:8080: an IPv4 backend cannot serve the IPv6 VIP [2001:db8::10]:80 with forwarding \"nat\" (NAT does not translate between families)",
        ),
        (
            refused(c.add_backend(&d.req("web", "[2001:db8::9]:8080", None)).await),
            "VIP \"web\": backend [2001:db8::9]:8080: an IPv6 backend cannot serve the IPv4 VIP 203.0.113.10:80 with forwarding \"nat\" (NAT does not translate between families)",
        ),
        (
            refused(c.add_backend(&d.req("tun6", "198.51.100.9", None)).await),
            "VIP \"tun6\": backend 198.51.100.9:443: an IPv4 backend cannot be reached with forwarding \"dsr-ipip\" from the IPv6 encap_source 2001:db8::fe (the outer header goes from encap_source to the backend, so every backend must be of encap_source's family; the VIP's own family may differ)",
        ),
        (
            refused(c.add_backend(&d.req("web6", "[fe80::1]:8080", None)).await),
            "VIP \"web6\": backend [fe80::1]:8080: a link-local address (fe80::/10) needs an interface scope, which the XDP data plane's route (FIB) lookup does not have: use a global or unique-local address",
        ),
        (
            refused(c.add_backend(&d.req("web6", "[::ffff:198.51.100.9]:8080", None)).await),
            "VIP \"web6\": backend [::ffff:198.51.100.9]:8080: an IPv4-mapped IPv6 address (::ffff:0:0/96) is an IPv4 host: write its IPv4 address",
        ),
    ];
    for (got, message) in cases {
        assert_eq!(got, (400, message.to_string()));
    }
    assert_eq!((d.fake.snapshot(), d.list().await), before);
    d.stop().await;
}

#[tokio::test]
async fn explain_places_ipv6_flows_as_the_data_plane_does() {
    let d = Daemon::start(&lb_toml(IPV6_VIPS)).await;
    let web6 = d.client.vips().await.unwrap()[2].id;
    let client = v6("2001:db8:ffff::33");
    let hash = client_hash(&client, 7);
    let slot = hash % RING;
    let expected = d.fake.lock().fake.rings[&web6][slot as usize];
    let e = d
        .client
        .explain(&ExplainRequest { vip: "web6".into(), client: "2001:db8:ffff::33".into(), quic_cid: None })
        .await
        .unwrap();
    assert_eq!((e.decision, e.hash, e.slot, e.backend_id), (Decision::Ring, Some(hash), Some(slot), Some(expected)));
    let addr = d.list().await.into_iter().find(|b| b.id == expected).unwrap().address;
    assert_eq!(e.backend, Some(addr));
    assert!(e.reason.contains(&format!("holds backend {addr} (id {expected})")), "{}", e.reason);
    assert!(addr.to_string().starts_with("[2001:db8::1"), "{addr}");
    // The connection-table key: the 16-byte addresses, ports in network order, family 6.
    let other = d.list().await.into_iter().find(|b| b.id != expected && b.vip == "web6").unwrap();
    let key = FlowKey::new(client, v6("2001:db8::10"), 40000u16.to_be(), 80u16.to_be(), 6, lb_common::family::IPV6);
    let generation = d.fake.lock().fake.backends[&other.id].generation;
    d.fake.lock().fake.flows.insert(key, FlowEntry { backend_id: other.id, vip_id: web6, generation, reply_hash: 0 });
    let request = ExplainRequest { vip: "web6".into(), client: "[2001:db8:ffff::33]:40000".into(), quic_cid: None };
    let e = d.client.explain(&request).await.unwrap();
    assert_eq!((e.decision, e.backend), (Decision::Conntrack, Some(other.address)));
    // A client of the other family never reaches this VIP.
    let e = refused(
        d.client.explain(&ExplainRequest { vip: "web6".into(), client: "192.0.2.33".into(), quic_cid: None }).await,
    );
    assert_eq!(e.0, 400);
    d.stop().await;
}
