//! The control API end to end: a daemon over a fake data plane, on a temp-dir socket.
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper::Method;
use lb_common::flow::{FlowEntry, FlowKey};
use lb_common::hash::{client_hash, flow_hash};
use lb_common::ipv4_bytes;
use tokio::sync::oneshot;

use super::client::{Client, ClientError};
use super::server::bind_unix;
use super::types::*;
use crate::config::Config;
use crate::daemon::{self, Options};
use crate::dataplane::Dataplane;
use crate::state::{Health, Origin};
use crate::testing::SharedFake;

const RING: u32 = 251;

fn lb_toml(extra: &str) -> String {
    format!(
        r#"
[daemon]
ring_size = {RING}
hash_seed = 7

[[vip]]
name = "web"
address = "203.0.113.10"
port = 80
backends = [ {{ address = "198.51.100.1", port = 8080 }}, {{ address = "198.51.100.2", port = 8080, weight = 50 }} ]

[[vip]]
name = "dns"
address = "203.0.113.11"
port = 53
protocol = "udp"
hash = "flow"
backends = [ {{ address = "198.51.100.3" }} ]
{extra}"#
    )
}

struct Daemon {
    dir: tempfile::TempDir,
    client: Client,
    fake: SharedFake,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Box<dyn Dataplane>>>,
}

impl Daemon {
    async fn start(text: &str) -> Daemon {
        Daemon::start_on(tempfile::tempdir().unwrap(), SharedFake::default(), text).await
    }

    async fn start_on(dir: tempfile::TempDir, fake: SharedFake, text: &str) -> Daemon {
        let config_path = dir.path().join("lb.toml");
        std::fs::write(&config_path, text).unwrap();
        let config = Config::load(&config_path).unwrap_or_else(|e| panic!("{e}"));
        let socket = socket_path(dir.path());
        let listener = bind_unix(&socket).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let options = Options {
            interface: "test0".into(),
            xdp_mode: None,
            ids_file: Some(dir.path().join("ids.json")),
        };
        let dp: Box<dyn Dataplane> = Box::new(fake.clone());
        let task = tokio::spawn(async move {
            daemon::run(config, dp, options, listener, None, async {
                let _ = stopped.await;
            })
            .await
            .unwrap()
        });
        let d = Daemon { client: Client::new(socket), dir, fake, stop: Some(stop), task: Some(task) };
        // Answers once the initial maps are written.
        d.client.status().await.unwrap();
        d
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("lb.toml")
    }

    async fn stop(mut self) -> tempfile::TempDir {
        self.stop.take().unwrap().send(()).unwrap();
        self.task.take().unwrap().await.unwrap();
        self.dir
    }

    async fn list(&self) -> Vec<BackendView> {
        self.client.backends(None).await.unwrap()
    }

    fn req(&self, vip: &str, address: &str, weight: Option<u64>) -> BackendRequest {
        BackendRequest { vip: vip.into(), address: address.into(), weight }
    }
}

fn socket_path(dir: &Path) -> PathBuf {
    dir.join("run").join("lb-ctl").join("test0.sock")
}

fn refused(r: Result<impl std::fmt::Debug, ClientError>) -> (u16, String) {
    match r {
        Err(ClientError::Refused { status, message }) => (status, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

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
    bind_unix(&socket).unwrap();
    drop(dir);
}

#[tokio::test]
async fn status_vips_and_list() {
    let d = Daemon::start(&lb_toml("")).await;
    let status = d.client.status().await.unwrap();
    assert_eq!(
        (status.interface.as_str(), status.vips, status.backends, status.backends_up),
        ("test0", 2, 3, 3)
    );
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
    d.fake.lock().fake.flows.insert(FlowKey::default(), FlowEntry { backend_id: id, vip_id: 0, generation, reply_hash: 0 });
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

    let removed =
        d.client.remove_backend(&d.req("203.0.113.10:80", "198.51.100.9:8080", None)).await.unwrap();
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
        (
            refused(c.add_backend(&d.req("nope", "198.51.100.9:8080", None)).await),
            (404, "unknown VIP \"nope\""),
        ),
        (
            refused(c.add_backend(&d.req("web", "198.51.100.1:8080", None)).await),
            (409, "VIP \"web\" already has backend 198.51.100.1:8080"),
        ),
        (
            refused(c.add_backend(&d.req("web", "198.51.100.300:8080", None)).await),
            (
                400,
                "malformed address \"198.51.100.300:8080\": expected ADDR:PORT or ADDR (IPv6 as [ADDR]:PORT)",
            ),
        ),
        (
            refused(c.add_backend(&d.req("web", "198.51.100.9:8080", Some(70000))).await),
            (400, "weight 70000 is out of range (0-65535)"),
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
            refused(c.explain(&ExplainRequest { vip: "web".into(), client: "somewhere".into() }).await),
            (400, "malformed client address \"somewhere\": expected ADDR or ADDR:PORT"),
        ),
        (
            refused(c.explain(&ExplainRequest { vip: "dns".into(), client: "192.0.2.1".into() }).await),
            (400, "VIP \"dns\" hashes the 5-tuple (hash = \"flow\"): give the client as ADDR:PORT"),
        ),
        (
            refused(
                c.call::<_, Changed>(Method::POST, "/backends", Some(&serde_json::json!({"vip": "web"})))
                    .await,
            ),
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
        (
            refused(c.call::<(), Changed>(Method::GET, "/nothing", None).await),
            (404, "no such endpoint: /v1/nothing"),
        ),
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
    let e =
        d.client.explain(&ExplainRequest { vip: "web".into(), client: "192.0.2.33".into() }).await.unwrap();
    assert_eq!(
        (e.decision, e.hash, e.slot, e.backend_id),
        (Decision::Ring, Some(hash), Some(slot), Some(expected))
    );
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
        .explain(&ExplainRequest { vip: "web".into(), client: "192.0.2.33:40000".into() })
        .await
        .unwrap();
    assert_eq!(e.decision, Decision::Ring);
    assert!(e.reason.starts_with("not in the connection table: a new flow; ring slot"), "{}", e.reason);
    let other = d.list().await.into_iter().find(|b| b.id != expected && b.vip == "web").unwrap();
    let key = FlowKey {
        src: ipv4_bytes(client),
        dst: ipv4_bytes([203, 0, 113, 10]),
        src_port: 40000u16.to_be(),
        dst_port: 80u16.to_be(),
        protocol: 6,
        family: 4,
        _pad: [0; 2],
    };
    let generation = d.fake.lock().fake.backends[&other.id].generation;
    d.fake.lock().fake.flows.insert(key, FlowEntry { backend_id: other.id, vip_id: web, generation, reply_hash: 0 });
    let e = d
        .client
        .explain(&ExplainRequest { vip: "web".into(), client: "192.0.2.33:40000".into() })
        .await
        .unwrap();
    assert_eq!((e.decision, e.backend), (Decision::Conntrack, Some(other.address)));
    assert_eq!(
        e.reason,
        format!("connection-table hit: this flow is pinned to backend {} (id {})", other.address, other.id)
    );
    // hash = "flow": the 5-tuple, ports in network order as the program reads them.
    let hash =
        flow_hash(&ipv4_bytes(client), &ipv4_bytes([203, 0, 113, 11]), 5353u16.to_be(), 53u16.to_be(), 17, 7);
    let e = d
        .client
        .explain(&ExplainRequest { vip: "dns".into(), client: "192.0.2.33:5353".into() })
        .await
        .unwrap();
    assert_eq!((e.hash, e.slot), (Some(hash), Some(hash % RING)));
    assert_eq!(e.backend_id, Some(d.fake.lock().fake.rings[&dns][(hash % RING) as usize]));
    d.stop().await;
}

#[tokio::test]
async fn reload_applies_the_difference_and_a_bad_file_changes_nothing() {
    let d = Daemon::start(&lb_toml("")).await;
    let web_id = d.list().await[0].id;
    // A good reload: one more backend for dns.
    std::fs::write(
        d.config_path(),
        lb_toml("").replace(
            "{ address = \"198.51.100.3\" }",
            "{ address = \"198.51.100.3\" }, { address = \"198.51.100.4\" }",
        ),
    )
    .unwrap();
    let r = d.client.reload().await.unwrap();
    assert!(r.ok);
    assert_eq!(r.message, "1 backends written, 1 rings written");
    assert_eq!(d.list().await.len(), 4);
    assert_eq!(d.list().await[0].id, web_id, "ids are kept");

    // A file with mistakes: refused, with file:line, nothing changes.
    let before = (d.fake.snapshot(), d.list().await);
    std::fs::write(d.config_path(), lb_toml("[[vip]]\naddress = \"203.0.113.12\"\nport = 99999\n")).unwrap();
    let (status, message) = refused(d.client.reload().await);
    assert_eq!(status, 400);
    let path = d.config_path().display().to_string();
    assert_eq!(
        message,
        format!(
            "reload refused, nothing changed:\n{path}:21: vip \"203.0.113.12:99999/tcp\": port must be 1-65535, got 99999"
        )
    );
    assert_eq!((d.fake.snapshot(), d.list().await), before);
    let last = d.client.status().await.unwrap().last_reload.unwrap();
    assert!(!last.ok);

    // Settings fixed for the life of the maps.
    std::fs::write(d.config_path(), lb_toml("").replace("ring_size = 251", "ring_size = 257")).unwrap();
    let (_, message) = refused(d.client.reload().await);
    assert!(
        message.ends_with("daemon.ring_size cannot change without a restart (running 251, file 257)"),
        "{message}"
    );
    assert_eq!((d.fake.snapshot(), d.list().await), before);
    d.stop().await;
}

#[tokio::test]
async fn health_transitions_reach_the_ring_through_the_writer() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accept = tokio::spawn(async move {
        loop {
            let _ = listener.accept().await;
        }
    });
    let text = format!(
        "[daemon]\nring_size = {RING}\n[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\n\
         health = {{ kind = \"tcp\", interval = \"50ms\", rise = 2, fall = 3 }}\n\
         backends = [ {{ address = \"127.0.0.1\", port = {port} }}, {{ address = \"127.0.0.2\", port = {port}, health = {{ kind = \"none\" }} }} ]\n"
    );
    let d = Daemon::start(&text).await;
    let web = d.client.vips().await.unwrap()[0].id;
    let checked = d.list().await[0].id;
    let wait_for = |want: Health| {
        let d = &d;
        async move {
            for _ in 0..100 {
                if d.list().await[0].health == want {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("backend never became {want:?}");
        }
    };
    wait_for(Health::Up).await;
    assert!(d.fake.lock().fake.rings[&web].contains(&checked));
    // Nothing listens any more: refused, down at the next check.
    accept.abort();
    let _ = accept.await;
    wait_for(Health::Down).await;
    assert!(!d.fake.lock().fake.rings[&web].contains(&checked), "a down backend leaves the ring");
    assert!(d.list().await[1].in_ring);
    d.stop().await;
}

#[tokio::test]
async fn a_restart_reuses_the_ids_and_drops_what_the_file_lacks() {
    let fake = SharedFake::default();
    let d = Daemon::start_on(tempfile::tempdir().unwrap(), fake.clone(), &lb_toml("")).await;
    let before: Vec<(String, u32)> =
        d.list().await.into_iter().map(|b| (b.address.to_string(), b.id)).collect();
    let added = d.client.add_backend(&d.req("web", "198.51.100.9:8080", None)).await.unwrap();
    let dir = d.stop().await;
    // Same maps (pinned), same directory (ids file), config listing web's backends reversed.
    let text = lb_toml("").replace(
        "{ address = \"198.51.100.1\", port = 8080 }, { address = \"198.51.100.2\", port = 8080, weight = 50 }",
        "{ address = \"198.51.100.2\", port = 8080, weight = 50 }, { address = \"198.51.100.1\", port = 8080 }",
    );
    let d = Daemon::start_on(dir, fake.clone(), &text).await;
    let mut after: Vec<(String, u32)> =
        d.list().await.into_iter().map(|b| (b.address.to_string(), b.id)).collect();
    after.sort();
    let mut before = before;
    before.sort();
    assert_eq!(after, before, "every backend keeps its id");
    assert!(
        !fake.lock().fake.backends[&added.backend_id].is_active(),
        "the API-added backend is not in the file"
    );
    d.stop().await;
}
