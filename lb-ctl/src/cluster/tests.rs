//! Flow sharing through a daemon: a peer's signed flows land in the connection table (DSR
//! VIPs only), and messages from strangers, with a wrong key or malformed are refused and
//! counted, changing nothing.
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lb_common::flow::FlowKey;

use super::wire::{WireFlow, encode};

/// A sequence now (the sender's clock in µs), as the sender numbers messages.
fn seq() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64
}
use crate::testing::SharedFake;
use crate::testing::rig::{Daemon, lb_toml};

const KEY: &str = "0123456789abcdef0123456789abcdef";

fn dsr_flow(client_port: u16, backend: &str) -> WireFlow {
    WireFlow {
        protocol: 6,
        client: SocketAddr::from(([192, 0, 2, 7], client_port)),
        vip: "203.0.113.12:80".parse().unwrap(),
        backend: backend.parse().unwrap(),
    }
}

fn key_of(f: &WireFlow) -> FlowKey {
    let v4 = |a: SocketAddr| match a.ip() {
        std::net::IpAddr::V4(v4) => lb_common::ipv4_bytes(v4.octets()),
        _ => unreachable!(),
    };
    FlowKey::new(
        v4(f.client),
        v4(f.vip),
        f.client.port().to_be(),
        f.vip.port().to_be(),
        f.protocol,
        lb_common::family::IPV4,
    )
}

async fn sharing(d: &Daemon) -> std::collections::BTreeMap<String, u64> {
    d.client.status().await.unwrap().flow_sharing.expect("a cluster daemon reports flow sharing")
}

async fn wait_for(d: &Daemon, what: &str, pred: impl Fn(&std::collections::BTreeMap<String, u64>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = sharing(d).await;
        if pred(&s) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_peers_flows_are_recorded_and_everything_else_is_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cluster.key"), format!("{KEY}\n")).unwrap();
    let listen = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let extra = format!(
        "\n[[vip]]\nname = \"dsr\"\naddress = \"203.0.113.12\"\nport = 80\nforwarding = \"dsr-ipip\"\nencap_source = \"198.51.100.254\"\n\
         backends = [ {{ address = \"198.51.100.21\" }}, {{ address = \"198.51.100.22\" }} ]\n\n\
         [cluster]\nlisten = \"{listen}\"\npeers = [\"127.0.0.1:9\"]\nkey_file = \"cluster.key\"\n"
    );
    let fake = SharedFake::default();
    let d = Daemon::start_on(dir, fake.clone(), &lb_toml(&extra)).await;
    let peer = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();

    // A peer's flows: recorded, pinned to this node's id of the named backend.
    let shared = [dsr_flow(40000, "198.51.100.22:80"), dsr_flow(40001, "198.51.100.21:80")];
    let first = encode(seq(), &shared, KEY.as_bytes());
    peer.send_to(&first, listen).await.unwrap();
    wait_for(&d, "the peer's flows recorded", |s| s["flows_recorded"] == 2).await;
    // The same message played again (by anyone on the path): refused.
    peer.send_to(&first, listen).await.unwrap();
    wait_for(&d, "the replay refused", |s| s["refused_replay"] == 1).await;
    let backend_22 = d.list().await.into_iter().find(|b| b.address.to_string() == "198.51.100.22:80").unwrap();
    let entry = fake.lock().fake.flows.get(&key_of(&shared[0])).copied().expect("recorded");
    assert_eq!(entry.backend_id, backend_22.id);

    // Flows of a NAT VIP, of no VIP here, of a backend not here: counted, not recorded.
    let nat = WireFlow { vip: "203.0.113.10:80".parse().unwrap(), ..dsr_flow(40002, "198.51.100.1:8080") };
    let nowhere = WireFlow { vip: "203.0.113.99:80".parse().unwrap(), ..dsr_flow(40003, "198.51.100.21:80") };
    let stranger_backend = dsr_flow(40004, "198.51.100.99:80");
    peer.send_to(&encode(seq(), &[nat, nowhere, stranger_backend], KEY.as_bytes()), listen).await.unwrap();
    wait_for(&d, "unknown flows counted", |s| s["flows_unknown"] == 3).await;

    // A wrong key, a malformed message, a sender that is no peer: refused, counted.
    let forged = [dsr_flow(40005, "198.51.100.21:80")];
    peer.send_to(&encode(seq(), &forged, b"not the cluster's key, no"), listen).await.unwrap();
    peer.send_to(b"LBF1 and nothing else", listen).await.unwrap();
    let stranger = tokio::net::UdpSocket::bind("127.0.0.2:0").await.unwrap();
    stranger.send_to(&encode(seq(), &forged, KEY.as_bytes()), listen).await.unwrap();
    wait_for(&d, "refusals counted", |s| {
        s["refused_bad_key"] == 1 && s["refused_malformed"] == 1 && s["refused_not_peer"] == 1
    })
    .await;
    assert!(!fake.lock().fake.flows.contains_key(&key_of(&forged[0])), "nothing refused was recorded");
    assert_eq!(sharing(&d).await["flows_recorded"], 2);
    let status = crate::cli::render::status(&d.client.status().await.unwrap());
    assert!(status.contains("flow share  sent 0 flows"), "{status}");
    d.stop().await;
}

/// A peer's flows to an IPv6 DSR VIP land in the connection table under the key the data
/// plane builds for IPv6 (16-byte addresses, family 6).
#[tokio::test]
async fn a_peers_ipv6_flows_are_recorded_with_ipv6_keys() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cluster.key"), KEY).unwrap();
    let listen = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let extra = format!(
        "\n[[vip]]\nname = \"dsr6\"\naddress = \"2001:db8::12\"\nport = 80\nforwarding = \"dsr-gue\"\nencap_source = \"2001:db8::fe\"\n\
         backends = [ {{ address = \"2001:db8::21\" }}, {{ address = \"2001:db8::22\" }} ]\n\n\
         [cluster]\nlisten = \"{listen}\"\npeers = [\"127.0.0.1:9\"]\nkey_file = \"cluster.key\"\n"
    );
    let fake = SharedFake::default();
    let d = Daemon::start_on(dir, fake.clone(), &lb_toml(&extra)).await;
    let peer = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let flow = WireFlow {
        protocol: 6,
        client: "[2001:db8:ffff::7]:40000".parse().unwrap(),
        vip: "[2001:db8::12]:80".parse().unwrap(),
        backend: "[2001:db8::22]:80".parse().unwrap(),
    };
    // A client of the other family than the VIP: no such flow.
    let mixed = WireFlow { client: "192.0.2.7:40001".parse().unwrap(), ..flow };
    peer.send_to(&encode(seq(), &[flow, mixed], KEY.as_bytes()), listen).await.unwrap();
    wait_for(&d, "the IPv6 flow recorded", |s| s["flows_recorded"] == 1 && s["flows_unknown"] == 1).await;
    let key = FlowKey::new(
        "2001:db8:ffff::7".parse::<std::net::Ipv6Addr>().unwrap().octets(),
        "2001:db8::12".parse::<std::net::Ipv6Addr>().unwrap().octets(),
        40000u16.to_be(),
        80u16.to_be(),
        6,
        lb_common::family::IPV6,
    );
    let backend = d.list().await.into_iter().find(|b| b.address == flow.backend).unwrap();
    assert_eq!(fake.lock().fake.flows.get(&key).map(|e| e.backend_id), Some(backend.id));
    d.stop().await;
}

/// A peer that floods: past `max_messages_per_second` its messages are refused and counted,
/// and the daemon keeps answering.
#[tokio::test]
async fn a_flooding_peer_is_held_to_the_rate() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cluster.key"), KEY).unwrap();
    let listen = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let extra = format!(
        "\n[[vip]]\nname = \"dsr\"\naddress = \"203.0.113.12\"\nport = 80\nforwarding = \"dsr-ipip\"\nencap_source = \"198.51.100.254\"\n\
         backends = [ {{ address = \"198.51.100.21\" }} ]\n\n\
         [cluster]\nlisten = \"{listen}\"\npeers = [\"127.0.0.1:9\", \"127.0.0.2:9\"]\nkey_file = \"cluster.key\"\nmax_messages_per_second = 5\n"
    );
    let d = Daemon::start_on(dir, SharedFake::default(), &lb_toml(&extra)).await;
    let peer = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for i in 0..200u16 {
        let message = encode(seq(), &[dsr_flow(30000 + i, "198.51.100.21:80")], KEY.as_bytes());
        peer.send_to(&message, listen).await.unwrap();
    }
    wait_for(&d, "the flood counted", |s| s["messages_received"] + s["refused_rate"] >= 150).await;
    let s = sharing(&d).await;
    assert!(s["refused_rate"] >= 100, "most of the flood refused: {s:?}");
    assert!(s["messages_received"] <= 20, "at most about the rate accepted: {s:?}");
    assert!(d.client.status().await.is_ok(), "the daemon keeps answering");
    // The other peer has a budget of its own: the flood holds up none of its messages.
    let other = tokio::net::UdpSocket::bind("127.0.0.2:0").await.unwrap();
    let before = s["messages_received"];
    for i in 0..3u16 {
        let message = encode(seq(), &[dsr_flow(31000 + i, "198.51.100.21:80")], KEY.as_bytes());
        other.send_to(&message, listen).await.unwrap();
    }
    wait_for(&d, "the other peer's messages taken", |s| s["messages_received"] >= before + 3).await;
    d.stop().await;
}

#[test]
fn cluster_settings_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("short.key"), "too short").unwrap();
    let path = dir.path().join("lb.toml");
    let problems = |text: &str| crate::config::Config::parse(text, &path).unwrap_err().problems();
    let p = problems("[cluster]\nlisten = \"nowhere\"\npeers = []\nkey_file = \"short.key\"\n");
    let file = path.display().to_string();
    assert_eq!(
        p,
        [
            format!("{file}:2: cluster: listen \"nowhere\" is not ADDR:PORT"),
            format!("{file}:1: cluster: peers is empty (the other nodes' listen addresses)"),
            format!(
                "{file}:4: cluster: key_file {} holds 9 bytes; at least 16 (e.g. `openssl rand -hex 32`)",
                dir.path().join("short.key").display()
            ),
        ]
    );
    let p =
        problems("[cluster]\nlisten = \"192.0.2.1:7946\"\npeers = [\"192.0.2.2:7946\"]\nkey_file = \"missing.key\"\n");
    assert!(p[0].contains("cluster: key_file") && p[0].contains("No such file"), "{p:?}");
    std::fs::write(dir.path().join("good.key"), KEY).unwrap();
    let nat_announced = "[cluster]\nlisten = \"192.0.2.1:7946\"\npeers = [\"192.0.2.2:7946\"]\nkey_file = \"good.key\"\n\n\
                         [[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\nannounce = { min_healthy = 1 }\n\
                         backends = [ { address = \"198.51.100.1\" } ]\n";
    let p = problems(nat_announced);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with(&format!("{file}:8: vip \"web\": forwarding \"nat\" with announce in a [cluster]")),
        "{p:?}"
    );
}
