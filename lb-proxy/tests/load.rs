//! The seeds' traffic scenarios through the proxy, ab-style: every request must succeed with a
//! byte-exact body, also while a backend is killed mid-run.
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_backends_1k_and_300k_500_requests_10_concurrent() {
    let b = backends(4).await;
    let p = proxy(http_spec(&b)).await;
    for len in [1024usize, 300 * 1024] {
        let failed = load(p.addr, &format!("/bytes/{len}"), Arc::new(pattern(len)), 500, 10).await;
        assert_eq!(failed, 0, "{len}-byte bodies: {failed} failed requests");
    }
    // Round-robin spread both runs evenly over the four backends.
    for be in &b {
        assert_eq!(be.hits(), 250, "backend {} got {}", be.id, be.hits());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_backends_10k_5000_requests_20_concurrent() {
    let b = backends(8).await;
    let p = proxy(http_spec(&b)).await;
    let failed = load(p.addr, "/bytes/10240", Arc::new(pattern(10240)), 5000, 20).await;
    assert_eq!(failed, 0);
    let total: u64 = b.iter().map(|x| x.hits()).sum();
    assert_eq!(total, 5000);
    assert!(b.iter().all(|x| x.hits() == 625), "{:?}", b.iter().map(|x| x.hits()).collect::<Vec<_>>());
    let stats = p.handle.stats();
    assert_eq!(stats[0].backends.iter().map(|s| s.requests).sum::<u64>(), 5000);
    assert!(stats[0].backends.iter().all(|s| s.errors == 0 && s.active == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_killed_mid_run_fails_no_idempotent_request() {
    let b = backends(4).await;
    let mut spec = http_spec(&b);
    spec.options.outlier.consecutive_failures = 1;
    spec.options.outlier.base_ejection = Duration::from_secs(30);
    let p = proxy(spec).await;
    let addr = p.addr;
    let run = tokio::spawn(async move { load(addr, "/slow/2", Arc::new(b"slow".to_vec()), 2000, 10).await });
    // Kill backend 0 once it has served part of the run (bounded wait).
    for _ in 0..2000 {
        if b[0].hits() >= 40 || run.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(!run.is_finished(), "the run ended before the kill; make it longer");
    b[0].kill().await;
    let killed_at = b[0].hits();
    let failed = tokio::time::timeout(LIMIT * 3, run).await.unwrap().unwrap();
    assert_eq!(failed, 0, "{failed} idempotent requests failed");
    assert_eq!(b[0].hits(), killed_at);
    let total: u64 = b.iter().map(|x| x.hits()).sum();
    assert!(total >= 2000, "the survivors served the rest: {total}");
    let s = &p.handle.stats()[0].backends[0];
    assert!(s.ejected, "the dead backend is ejected: {s:?}");
}
