//! Backend failures: retries, timeouts, outlier ejection, broken responses, full backends.
mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use hyper::Request;
use lb_proxy::BackendSpec;

const NO_ANSWER: &[u8] = b"";
const ERROR_500: &[u8] = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\nconnection: close\r\n\r\nboom";
const TRUNCATED: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n0123456789";

fn no_outlier(spec: &mut lb_proxy::ProxyVipSpec) {
    spec.options.outlier.consecutive_failures = 0;
}

#[tokio::test]
async fn connect_failure_is_retried_on_another_backend() {
    let good = Backend::start(1).await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![BackendSpec::new(dead_addr().await), good.spec()];
    no_outlier(&mut spec);
    let p = proxy(spec).await;
    let mut c = Client::connect(p.addr).await;
    for _ in 0..20 {
        // Every request, even a POST with a body: it never left the proxy.
        let req = Request::post("/echo").header("host", "x").body(Full::new(Bytes::from_static(b"data"))).unwrap();
        let g = c.send(req).await.unwrap();
        assert_eq!((g.status, &g.body[..]), (200, &b"data"[..]));
    }
    let s = &p.handle.stats()[0].backends;
    assert_eq!(s[0].errors, 10, "round-robin sent every other request to the dead one first");
    assert_eq!(good.hits(), 20);
}

#[tokio::test]
async fn all_backends_dead_is_502_and_none_is_503() {
    let mut spec = http_spec(&[]);
    spec.backends = vec![BackendSpec::new(dead_addr().await), BackendSpec::new(dead_addr().await)];
    let p = proxy(spec).await;
    assert_eq!(fetch(p.addr, "/").await.status, 502);
    p.handle.set_backends("web", vec![]).unwrap();
    assert_eq!(fetch(p.addr, "/").await.status, 503);
}

#[tokio::test]
async fn idempotent_requests_are_retried_after_a_dropped_request_others_are_not() {
    let bad = raw_backend(NO_ANSWER).await;
    let good = Backend::start(1).await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![BackendSpec::new(bad.addr), good.spec()];
    no_outlier(&mut spec);
    let p = proxy(spec).await;
    let mut c = Client::connect(p.addr).await;
    // Round-robin: the first request goes to the bad backend, which reads it and hangs up.
    let post = Request::post("/echo").header("host", "x").body(Full::new(Bytes::from_static(b"once"))).unwrap();
    assert_eq!(c.send(post).await.unwrap().status, 502, "a POST that reached a backend is not replayed");
    assert_eq!(bad.heads(), 1);
    assert_eq!(good.hits(), 0);
    assert_eq!(c.get("/x").await.unwrap().status, 200); // to the good one
    let g = c.get("/x").await.unwrap(); // to the bad one, then retried on the good one
    assert_eq!(g.status, 200);
    assert_eq!(bad.heads(), 2);
    assert_eq!(good.hits(), 2);
}

#[tokio::test]
async fn backend_closing_mid_response_gives_a_clean_error() {
    let bad = raw_backend(TRUNCATED).await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![BackendSpec::new(bad.addr)];
    let p = proxy(spec).await;
    // Client::send panics if this hangs; the body must fail, not come back short as success.
    let mut c = Client::connect(p.addr).await;
    let r = c.get("/").await;
    assert!(r.is_err(), "a truncated body must surface as an error: {r:?}");
    // h2 clients get a stream error the same way.
    let stream = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let (mut s, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = Request::get("http://x/").body(Full::<Bytes>::default()).unwrap();
    let body = async {
        let resp = s.send_request(req).await?;
        http_body_util::BodyExt::collect(resp.into_body()).await.map(|_| ())
    };
    assert!(tokio::time::timeout(LIMIT, body).await.unwrap().is_err());
    assert!(p.handle.stats()[0].backends[0].errors >= 2);
}

#[tokio::test]
async fn slow_backend_gets_504() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.timeouts.backend_header = Duration::from_millis(200);
    spec.options.retries.max = 0;
    let p = proxy(spec).await;
    assert_eq!(fetch(p.addr, "/slow/3000").await.status, 504);
    assert_eq!(fetch(p.addr, "/slow/1").await.status, 200);
    // The whole-request budget applies across retries too.
    let mut spec = http_spec(&b);
    spec.options.timeouts.request = Duration::from_millis(200);
    let p = proxy(spec).await;
    assert_eq!(fetch(p.addr, "/slow/3000").await.status, 504);
}

#[tokio::test]
async fn connect_timeout_gives_504() {
    // A listener whose accept queue is full and never drained: further SYNs go unanswered.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(loopback()).unwrap();
    let full = sock.listen(0).unwrap();
    let addr = full.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(200), tokio::net::TcpStream::connect(addr)).await
        {
            fillers.push(s);
        }
    }
    let mut spec = http_spec(&[]);
    spec.backends = vec![BackendSpec::new(addr)];
    spec.options.timeouts.connect = Duration::from_millis(150);
    spec.options.retries.max = 1;
    let p = proxy(spec).await;
    assert_eq!(fetch(p.addr, "/").await.status, 504);
    drop(full);
}

#[tokio::test]
async fn consecutive_5xx_eject_a_backend_for_a_growing_cooldown() {
    let bad = raw_backend(ERROR_500).await;
    let good = Backend::start(1).await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![BackendSpec::new(bad.addr), good.spec()];
    spec.options.outlier.consecutive_failures = 3;
    spec.options.outlier.base_ejection = Duration::from_secs(1);
    spec.options.outlier.max_ejection = Duration::from_secs(60);
    let p = proxy(spec).await;
    let mut c = Client::connect(p.addr).await;
    let mut codes = Vec::new();
    for _ in 0..20 {
        codes.push(c.get("/").await.unwrap().status);
    }
    // 5xx answers are passed on (not retried); the third one in a row ejects the backend.
    assert_eq!(codes.iter().filter(|s| **s == 500).count(), 3, "{codes:?}");
    assert_eq!(bad.heads(), 3);
    assert!(p.handle.stats()[0].backends[0].ejected);
    // After the cooldown it is tried again: one failure re-ejects it, now for 2 s.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..10 {
        c.get("/").await.unwrap();
    }
    assert_eq!(bad.heads(), 4, "exactly one probe after the first cooldown");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..10 {
        c.get("/").await.unwrap();
    }
    assert_eq!(bad.heads(), 4, "the second cooldown is longer than the first");
}

#[tokio::test]
async fn maxconn_queue_is_bounded_and_full_gives_503() {
    let b = backends(1).await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![BackendSpec { max_connections: Some(1), ..b[0].spec() }];
    spec.options.limits.queue_per_backend = 1;
    let p = proxy(spec).await;
    let addr = p.addr;
    let tasks: Vec<_> = (0..3).map(|_| tokio::spawn(async move { fetch(addr, "/slow/1000").await.status })).collect();
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    codes.sort();
    assert_eq!(codes, vec![200, 200, 503], "one served, one queued then served, one refused");
    assert_eq!(b[0].hits(), 2);
}

#[tokio::test]
async fn idempotent_requests_answered_503_are_tried_on_another_backend_when_asked() {
    let deploying = raw_backend(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n").await;
    let good = Backend::start(1).await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![lb_proxy::BackendSpec::new(deploying.addr), good.spec()];
    spec.options.retries.on_status = vec![503];
    // Outlier ejection would take the 503 backend out after a few: keep it in to see both.
    spec.options.outlier.consecutive_failures = 1000;
    let p = proxy(spec).await;
    for _ in 0..6 {
        let got = fetch(p.addr, "/").await;
        assert_eq!((got.status, got.backend()), (200, 1), "every GET ends on the serving backend");
    }
    assert!(deploying.heads() >= 2, "round robin sent some to the 503 first");
    assert!(p.handle.stats()[0].retries >= 2);
    // A POST is not sent twice: the 503 reaches the client when it was picked.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let req = hyper::Request::post("/").header("host", "x").body(http_body_util::Full::from("a")).unwrap();
        statuses.push(Client::connect(p.addr).await.send(req).await.unwrap().status);
    }
    assert!(statuses.contains(&503) && statuses.contains(&200), "{statuses:?}");
}

#[tokio::test]
async fn the_last_503_is_answered_when_no_other_backend_is_left() {
    let only = raw_backend(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n").await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![lb_proxy::BackendSpec::new(only.addr)];
    spec.options.retries.on_status = vec![503];
    let p = proxy(spec).await;
    assert_eq!(fetch(p.addr, "/").await.status, 503, "the backend's answer, not a 502");
    assert_eq!(only.heads(), 1, "nowhere else to try");
}
