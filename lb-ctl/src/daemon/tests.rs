//! The daemon's life through its API: reloads, health transitions, restarts.
use std::time::Duration;

use crate::state::Health;
use crate::testing::rig::{Daemon, RING, lb_toml, refused};
use crate::testing::{Op, SharedFake};

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
    assert!(message.ends_with("daemon.ring_size cannot change without a restart (running 251, file 257)"), "{message}");
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
         backends = [ {{ address = \"198.51.100.1\", health = {{ address = \"127.0.0.1:{port}\" }} }}, {{ address = \"198.51.100.2\", health = {{ kind = \"none\" }} }} ]\n"
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
    // `backends list` says since when and why; metrics count the transitions.
    let b = &d.list().await[0];
    assert_eq!(b.health_transitions, 2, "pending -> up -> down: {b:?}");
    assert!(b.health_reason.as_deref().is_some_and(|r| r.contains("refused")), "{b:?}");
    assert!(b.health_since_unix.is_some_and(|t| t + 60 > super::unix_now()), "{b:?}");
    assert_eq!(d.list().await[1].health_transitions, 0, "an unchecked backend has none");
    let metrics = d.client.raw(hyper::Method::GET, "/v1/metrics", None::<&()>).await.unwrap().1;
    let metrics = String::from_utf8_lossy(&metrics);
    let line = "lb_backend_health_transitions_total{vip=\"web\",backend=\"198.51.100.1:80\"} 2";
    assert!(metrics.contains(line), "{line} in:\n{metrics}");
    let checks = "lb_health_check_duration_seconds_count{vip=\"web\",backend=\"198.51.100.1:80\"} ";
    let count: u64 = metrics.lines().find_map(|l| l.strip_prefix(checks)).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(count >= 3, "every check's duration is recorded: {checks}{count} in:\n{metrics}");
    d.stop().await;
}

#[tokio::test]
async fn a_restart_keeps_ids_and_api_changes_and_a_reload_undoes_them() {
    let fake = SharedFake::default();
    let d = Daemon::start_on(tempfile::tempdir().unwrap(), fake.clone(), &lb_toml("")).await;
    let before: Vec<(String, u32)> = d.list().await.into_iter().map(|b| (b.address.to_string(), b.id)).collect();
    let added = d.client.add_backend(&d.req("web", "198.51.100.9:8080", Some(30))).await.unwrap();
    d.client.drain_backend(&d.req("web", "198.51.100.2:8080", None)).await.unwrap();
    d.client.remove_backend(&d.req("dns", "198.51.100.3:53", None)).await.unwrap();
    let running = d.list().await;
    let dir = d.stop().await;
    // Same maps (pinned), same directory (saved state), config listing web's backends reversed.
    let text = lb_toml("").replace(
        "{ address = \"198.51.100.1\", port = 8080 }, { address = \"198.51.100.2\", port = 8080, weight = 50 }",
        "{ address = \"198.51.100.2\", port = 8080, weight = 50 }, { address = \"198.51.100.1\", port = 8080 }",
    );
    std::fs::write(dir.path().join("lb.toml"), &text).unwrap();
    let d = Daemon::start_on(dir, fake.clone(), &text).await;
    let sorted = |mut v: Vec<crate::api::types::BackendView>| {
        v.sort_by_key(|b| b.id);
        v.into_iter().map(|b| (b.address, b.id, b.weight, b.state, b.origin)).collect::<Vec<_>>()
    };
    assert_eq!(sorted(d.list().await), sorted(running), "a restart brings back the running set");
    assert!(fake.lock().fake.backends[&added.backend_id].is_active(), "the API-added backend still serves");
    assert_eq!(d.client.status().await.unwrap().api_changes, 3);

    // A reload makes the file the truth again, and says what it undid.
    let r = d.client.reload().await.unwrap();
    assert!(r.message.contains("undid 3 API changes"), "{}", r.message);
    let mut after: Vec<(String, u32)> = d.list().await.into_iter().map(|b| (b.address.to_string(), b.id)).collect();
    after.sort();
    let mut before = before;
    before.sort();
    assert_eq!(after[..2], before[..2], "web's file backends keep their ids");
    assert_eq!(after.len(), 3, "the API-added backend is gone, dns's backend is back");
    assert!(!fake.lock().fake.backends[&added.backend_id].is_active());
    d.stop().await;
}

/// A restart starts from the last known health: a backend known dead is not put back in the
/// ring until its check says it is up (it used to be "pending" with every other backend, and
/// an all-pending VIP forwards to all).
#[tokio::test]
async fn a_restart_starts_from_the_last_known_health() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let live = listener.local_addr().unwrap().port();
    let accept = tokio::spawn(async move {
        loop {
            let _ = listener.accept().await;
        }
    });
    let dead = crate::testing::ports::free_port();
    let text = |interval: &str| {
        format!(
            "[daemon]\nring_size = {RING}\n[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\n\
             health = {{ kind = \"tcp\", interval = \"{interval}\", rise = 1, fall = 1 }}\n\
             backends = [ {{ address = \"198.51.100.1\", health = {{ address = \"127.0.0.1:{live}\" }} }}, {{ address = \"198.51.100.2\", health = {{ address = \"127.0.0.1:{dead}\" }} }} ]\n"
        )
    };
    let fake = SharedFake::default();
    let d = Daemon::start_on(tempfile::tempdir().unwrap(), fake.clone(), &text("50ms")).await;
    for _ in 0..100 {
        let l = d.list().await;
        if l[0].health == Health::Up && l[1].health == Health::Down {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (web, dead_id) = (d.client.vips().await.unwrap()[0].id, d.list().await[1].id);
    assert_eq!(d.list().await[1].health, Health::Down);
    let changes = |list: Vec<crate::api::types::BackendView>| {
        list.into_iter().map(|b| (b.health_since_unix, b.health_reason)).collect::<Vec<_>>()
    };
    let before = changes(d.list().await);
    assert!(before.iter().all(|(since, reason)| since.is_some() && reason.is_some()), "{before:?}");
    let dir = d.stop().await;
    // Checks far apart now: what the restarted daemon shows first is what it restored.
    std::fs::write(dir.path().join("lb.toml"), text("1h")).unwrap();
    let d = Daemon::start_on(dir, fake.clone(), &text("1h")).await;
    let healths: Vec<Health> = d.list().await.iter().map(|b| b.health).collect();
    assert_eq!(healths, [Health::Up, Health::Down]);
    assert_eq!(changes(d.list().await), before, "since when and why, as before the restart");
    assert!(!fake.lock().fake.rings[&web].contains(&dead_id), "the dead backend stays out of the ring");
    d.stop().await;
    accept.abort();
}

/// Saved ids but no pinned maps (bpffs cleared): the maps are written whole, CONFIG included,
/// instead of assumed (a zeroed CONFIG makes the program pass every VIP packet).
#[tokio::test]
async fn saved_ids_with_fresh_maps_write_everything() {
    let d = Daemon::start(&lb_toml("")).await;
    let written = d.fake.snapshot();
    let dir = d.stop().await;
    let fresh = SharedFake::default();
    let d = Daemon::start_with(dir, fresh.clone(), &lb_toml(""), false).await;
    assert_eq!(fresh.snapshot(), written, "the fresh maps hold the whole state");
    assert_ne!(fresh.lock().fake.config.ring_size, 0, "CONFIG written");
    d.stop().await;
}

/// `daemon.new_flow_budget` reaches the data plane's CONFIG at start and on reload.
#[tokio::test]
async fn the_new_flow_budget_follows_the_file() {
    let d = Daemon::start(&lb_toml("")).await;
    assert_eq!(d.fake.snapshot().0.new_flow_budget, lb_common::limits::DEFAULT_NEW_FLOW_BUDGET);
    std::fs::write(d.config_path(), lb_toml("").replace("hash_seed = 7", "hash_seed = 7\nnew_flow_budget = 1000"))
        .unwrap();
    let r = d.client.reload().await.unwrap();
    assert_eq!((r.ok, r.message.as_str()), (true, "1 config"));
    assert_eq!(d.fake.snapshot().0.new_flow_budget, 1000);
    d.stop().await;
}

/// `daemon.shutdown_grace`: a stopping daemon lets a proxy VIP's request in progress finish
/// within the grace, and cuts it past the grace.
#[tokio::test]
async fn a_stopping_daemon_gives_requests_in_progress_the_shutdown_grace() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    for (grace, finishes) in [("3s", true), ("100ms", false)] {
        // A backend that answers a second after the request.
        let backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let backend_port = backend.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = backend.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 2048];
                    let _ = s.read(&mut buf).await;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nslow").await;
                });
            }
        });
        let port = crate::testing::ports::free_port();
        let proxy_vip = format!(
            "[[vip]]\nname = \"app\"\naddress = \"127.0.0.1\"\nport = {port}\nforwarding = \"proxy\"\n\
             backends = [ {{ address = \"127.0.0.1\", port = {backend_port} }} ]\n"
        );
        let text =
            lb_toml(&proxy_vip).replace("hash_seed = 7", &format!("hash_seed = 7\nshutdown_grace = \"{grace}\""));
        let d = Daemon::start(&text).await;
        let request = tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: app\r\n\r\n").await.unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out).await;
            out
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        d.stop().await;
        let answer = request.await.unwrap();
        assert_eq!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("slow"),
            finishes,
            "grace {grace}: {answer:?}"
        );
    }
}

#[tokio::test]
async fn undrain_undoes_a_drain_and_a_reload_names_the_drains_it_undid() {
    async fn state(d: &Daemon, addr: &str) -> (String, bool) {
        let b = d.list().await.into_iter().find(|b| b.address.to_string() == addr).unwrap();
        (b.state, b.in_ring)
    }
    let d = Daemon::start(&lb_toml("")).await;
    d.client.drain_backend(&d.req("web", "198.51.100.1:8080", None)).await.unwrap();
    assert_eq!(state(&d, "198.51.100.1:8080").await, ("draining".to_string(), false));
    assert_eq!(d.client.status().await.unwrap().api_changes, 1);

    let changed = d.client.undrain_backend(&d.req("web", "198.51.100.1:8080", None)).await.unwrap();
    assert!(changed.message.contains("undrained"), "{}", changed.message);
    assert_eq!(state(&d, "198.51.100.1:8080").await, ("active".to_string(), true));
    assert_eq!(d.client.status().await.unwrap().api_changes, 0, "nothing left to undo");

    // A backend that is not drained, or not there, is refused and nothing changes.
    let (status, message) = refused(d.client.undrain_backend(&d.req("web", "198.51.100.1:8080", None)).await);
    assert_eq!(status, 400, "{message}");
    assert!(message.contains("198.51.100.1:8080 is not drained"), "{message}");
    assert_eq!(refused(d.client.undrain_backend(&d.req("web", "198.51.100.7:8080", None)).await).0, 404);

    d.client.drain_backend(&d.req("web", "198.51.100.2:8080", None)).await.unwrap();
    let r = d.client.reload().await.unwrap();
    assert!(r.message.contains("undid 1 API changes (drain of 198.51.100.2:8080 of 203.0.113.10:80"), "{}", r.message);
    assert_eq!(state(&d, "198.51.100.2:8080").await.0, "active");
}

/// `node drain` on a daemon that announces no VIP would change nothing: refused, and the
/// node is not marked drained.
#[tokio::test]
async fn a_node_drain_without_announced_vips_is_refused() {
    let d = Daemon::start(&lb_toml("")).await;
    let e = d.client.node(true).await.unwrap_err().to_string();
    assert!(e.contains("no VIP of this daemon is announced") && e.contains("nothing was changed"), "{e}");
    assert!(!d.client.status().await.unwrap().node_drained);
    d.stop().await;
}

/// A file changed while the daemon was stopped is applied in full at the next start: the maps
/// the restart finds hold what the last run wrote, which the saved ids alone do not say (they
/// keep no forwarding, hash or QUIC setting). Before, a restart assumed NAT and client-IP hash
/// for every saved VIP, so a VIP changed from `hash = "flow"` to the default kept its old
/// hash in the maps, and the file's proxy VIPs were "removed" from maps they never were in.
#[tokio::test]
async fn a_restart_applies_what_changed_in_the_file_meanwhile() {
    let fake = SharedFake::default();
    let proxy = format!(
        "\n[[vip]]\nname = \"site\"\naddress = \"127.0.0.1\"\nport = {}\nprotocol = \"http\"\n\
         forwarding = \"proxy\"\nbackends = [ {{ address = \"127.0.0.1\", port = 9 }} ]\n",
        crate::testing::ports::free_port()
    );
    let proxy = proxy.as_str();
    let d = Daemon::start_on(tempfile::tempdir().unwrap(), fake.clone(), &lb_toml(proxy)).await;
    let dns = |fake: &SharedFake| {
        let inner = fake.lock();
        inner.fake.vips.values().find(|v| v.key.port == 53u16.to_be()).copied().expect("dns is in the maps")
    };
    assert_eq!(dns(&fake).hash, lb_common::vip::hash_mode::FLOW);
    let dir = d.stop().await;
    fake.take_ops();
    // dns loses `hash = "flow"` while the daemon is stopped.
    let text = lb_toml(proxy).replace("hash = \"flow\"\n", "");
    std::fs::write(dir.path().join("lb.toml"), &text).unwrap();
    let d = Daemon::start_on(dir, fake.clone(), &text).await;
    assert_eq!(dns(&fake).hash, lb_common::vip::hash_mode::CLIENT_IP, "the new hash reached the maps");
    let removed: Vec<Op> =
        fake.take_ops().into_iter().filter(|op| matches!(op, Op::RemoveVip(_) | Op::RemoveBackend(_))).collect();
    assert!(removed.is_empty(), "nothing was in the maps to remove: {removed:?}");
    d.stop().await;
}
