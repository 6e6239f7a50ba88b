//! Backend choice: each algorithm, health, draining, runtime backend changes.
mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use hyper::Request;
use lb_common::backend::BACKEND_NONE;
use lb_common::hash::client_hash;
use lb_common::limits::DEFAULT_RING_SIZE;
use lb_common::maglev::{RingMember, build_ring};
use lb_proxy::{BackendSpec, Balance, HashKey};

async fn spread(p: &TestProxy, n: usize) -> HashMap<usize, usize> {
    let mut c = Client::connect(p.addr).await;
    let mut seen = HashMap::new();
    for _ in 0..n {
        *seen.entry(c.get("/").await.unwrap().backend()).or_insert(0) += 1;
    }
    seen
}

fn with_header(name: &str, value: &str) -> Request<Full<Bytes>> {
    Request::get("/").header("host", "x").header(name, value).body(Full::default()).unwrap()
}

#[tokio::test]
async fn weighted_round_robin_follows_weights() {
    let b = backends(3).await;
    let mut spec = http_spec(&b);
    spec.options.balance = Balance::WeightedRoundRobin;
    spec.backends[0].weight = 5;
    spec.backends[1].weight = 2;
    spec.backends[2].weight = 1;
    let p = proxy(spec).await;
    let seen = spread(&p, 800).await;
    assert_eq!((seen[&0], seen[&1], seen[&2]), (500, 200, 100), "{seen:?}");
}

#[tokio::test]
async fn least_connections_avoids_the_busy_backend() {
    let b = backends(2).await;
    let mut spec = http_spec(&b);
    spec.options.balance = Balance::LeastConnections;
    let p = proxy(spec).await;
    let addr = p.addr;
    let slow = tokio::spawn(async move { fetch(addr, "/slow/1500").await.backend() });
    wait_active(&p, 1).await;
    let busy = p.handle.stats()[0].backends.iter().position(|s| s.active == 1).unwrap();
    let seen = spread(&p, 20).await;
    assert_eq!(seen.get(&(1 - busy)), Some(&20), "all quick requests avoid the busy one: {seen:?}");
    assert_eq!(slow.await.unwrap(), busy);
}

#[tokio::test]
async fn power_of_two_mostly_avoids_the_busy_backend() {
    let b = backends(2).await;
    let mut spec = http_spec(&b);
    spec.options.balance = Balance::PowerOfTwo;
    let p = proxy(spec).await;
    let addr = p.addr;
    let slow = tokio::spawn(async move { fetch(addr, "/slow/3000").await });
    wait_active(&p, 1).await;
    let busy = p.handle.stats()[0].backends.iter().position(|s| s.active == 1).unwrap();
    let seen = spread(&p, 200).await;
    // Only a draw of the busy one twice (1 in 4) sends a request there.
    let idle = seen.get(&(1 - busy)).copied().unwrap_or(0);
    assert!(idle >= 120, "{seen:?}");
    assert!(idle < 200 || seen.len() == 1);
    slow.abort();
}

async fn wait_active(p: &TestProxy, n: u64) {
    for _ in 0..1000 {
        if p.handle.stats()[0].backends.iter().map(|s| s.active).sum::<u64>() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("never saw {n} active requests");
}

#[tokio::test]
async fn consistent_hash_on_client_ip_uses_the_data_plane_ring() {
    let b = backends(5).await;
    // The same choice computed with lb-common's ring and flow hash, as the XDP program would.
    let keys: Vec<[u8; 18]> = b
        .iter()
        .map(|x| {
            let mut k = [0u8; 18];
            k[..4].copy_from_slice(&[127, 0, 0, 1]);
            k[16..].copy_from_slice(&x.addr.port().to_be_bytes());
            k
        })
        .collect();
    let members: Vec<RingMember<'_>> =
        keys.iter().enumerate().map(|(i, k)| RingMember { id: i as u32, weight: 1, key: k }).collect();
    let ring = build_ring(&members, DEFAULT_RING_SIZE);
    let src = lb_common::ipv4_bytes([127, 0, 0, 1]);
    let pick = |seed: u32| ring[(client_hash(&src, seed) % DEFAULT_RING_SIZE) as usize];
    // The data plane's hash seed too: one under which this client lands elsewhere than under 0.
    let seed = (1..).find(|s| pick(*s) != pick(0)).unwrap();
    for seed in [0, seed] {
        let mut spec = http_spec(&b);
        spec.options.balance = Balance::ConsistentHash { key: HashKey::ClientIp };
        spec.hash_seed = seed;
        let p = proxy(spec).await;
        let seen = spread(&p, 30).await;
        assert_eq!(seen.len(), 1, "one client address, one backend: {seen:?}");
        assert_ne!(pick(seed), BACKEND_NONE);
        assert_eq!(*seen.keys().next().unwrap(), pick(seed) as usize, "seed {seed}");
    }
}

#[tokio::test]
async fn consistent_hash_on_header_and_cookie_is_sticky_and_minimal_on_change() {
    for key in [HashKey::Header("x-user".into()), HashKey::Cookie("session".into())] {
        let b = backends(4).await;
        let mut spec = http_spec(&b);
        spec.options.balance = Balance::ConsistentHash { key: key.clone() };
        let p = proxy(spec).await;
        let mut c = Client::connect(p.addr).await;
        let req = |i: usize| match &key {
            HashKey::Header(h) => with_header(h, &format!("user-{i}")),
            HashKey::Cookie(n) => with_header("cookie", &format!("a=1; {n}=user-{i}")),
            HashKey::ClientIp => unreachable!(),
        };
        let mut first = HashMap::new();
        for i in 0..60 {
            first.insert(i, c.send(req(i)).await.unwrap().backend());
        }
        for i in 0..60 {
            assert_eq!(c.send(req(i)).await.unwrap().backend(), first[&i], "{key:?}: key {i} moved");
        }
        let used: HashSet<_> = first.values().collect();
        assert!(used.len() >= 3, "{key:?}: keys spread over backends: {used:?}");
        // Remove backend 3: its keys move; of the others, Maglev moves only a few (its
        // disruption is minimal, not zero: a ring slot can change hands between survivors).
        p.handle.set_backends("web", b[..3].iter().map(Backend::spec).collect()).unwrap();
        let mut stayed = 0;
        let mut moved_anyway = 0;
        for i in 0..60 {
            let now = c.send(req(i)).await.unwrap().backend();
            if first[&i] != 3 {
                stayed += 1;
                if now != first[&i] {
                    moved_anyway += 1;
                }
            } else {
                assert_ne!(now, 3, "{key:?}: key {i} still on the removed backend");
            }
        }
        assert!(
            moved_anyway * 10 <= stayed,
            "{key:?}: {moved_anyway} of {stayed} keys moved though their backend stayed"
        );
    }
}

#[tokio::test]
async fn health_down_and_draining_backends_get_no_new_requests() {
    let b = backends(3).await;
    let p = proxy(http_spec(&b)).await;
    p.handle.set_backend_health("web", b[1].addr, false).unwrap();
    let seen = spread(&p, 30).await;
    assert!(!seen.contains_key(&1), "{seen:?}");
    p.handle.set_backend_health("web", b[1].addr, true).unwrap();
    assert!(spread(&p, 30).await.contains_key(&1));
    assert!(p.handle.set_backend_health("web", dead_addr().await, false).is_err());
    assert!(p.handle.set_backend_health("nope", b[1].addr, false).is_err());

    // Drain backend 0 (weight 0) while it serves a slow request: that one finishes.
    let addr = p.addr;
    let mut slow = None;
    for _ in 0..3 {
        let t = tokio::spawn(async move { fetch(addr, "/slow/800").await });
        wait_active(&p, 1).await;
        if p.handle.stats()[0].backends[0].active == 1 {
            slow = Some(t);
            break;
        }
        t.await.unwrap();
    }
    let slow = slow.expect("a slow request landed on backend 0");
    let mut specs: Vec<BackendSpec> = b.iter().map(Backend::spec).collect();
    specs[0].weight = 0;
    p.handle.set_backends("web", specs).unwrap();
    let seen = spread(&p, 30).await;
    assert!(!seen.contains_key(&0), "{seen:?}");
    let g = slow.await.unwrap();
    assert_eq!((g.status, g.backend()), (200, 0), "the in-flight request finished");
    let stats = &p.handle.stats()[0].backends;
    assert_eq!(stats[0].weight, 0);
    assert!(stats[0].requests >= 1, "counters survive the weight change");
}

#[tokio::test]
async fn backends_added_at_run_time_are_used() {
    let b = backends(2).await;
    let p = proxy(http_spec(&b[..1])).await;
    assert_eq!(spread(&p, 10).await.keys().copied().collect::<Vec<_>>(), vec![0]);
    p.handle.set_backends("web", b.iter().map(Backend::spec).collect()).unwrap();
    assert_eq!(spread(&p, 10).await.len(), 2);
}
