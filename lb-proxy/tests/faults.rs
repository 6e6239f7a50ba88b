//! Faults found from outside (issue 10), each as the outsider saw it: client faults blamed on
//! backends, upload time counted against backend timeouts, uneven round robin, smuggling-guard
//! gaps, endless bodies and tunnels, silent slow-loris closes, forwarded lines dropped, Host
//! rules, keep-alive governed by the wrong timer, malformed bodies answered 502.
mod common;

use std::time::Duration;

use common::*;
use lb_proxy::ForwardedHeaders;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const MALFORMED_CHUNKED: &str =
    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n";

fn vip_stats(p: &TestProxy) -> lb_proxy::VipStats {
    p.handle.stats().remove(0)
}

/// The VIP's figures once the send timeout has cut one client off and its backend is free
/// again; panics if that does not happen within 10 s.
async fn cut_and_freed(p: &TestProxy) -> lb_proxy::VipStats {
    let freed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let stats = vip_stats(p);
            if stats.client_timeouts == 1 && stats.backends[0].active == 0 {
                return stats;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    freed.unwrap_or_else(|_| panic!("the stalled client still holds its backend: {:?}", vip_stats(p)))
}

#[tokio::test]
async fn client_faults_never_count_against_backends() {
    let b = backends(2).await;
    let mut spec = http_spec(&b);
    spec.options.outlier.consecutive_failures = 2;
    let p = proxy(spec).await;
    for _ in 0..6 {
        let out = raw(p.addr, MALFORMED_CHUNKED.as_bytes()).await;
        assert_eq!(statuses(&out), vec![400], "{out}");
    }
    // Aborted uploads: a promised body cut short by the client closing.
    for _ in 0..4 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = vip_stats(&p);
    for bs in &stats.backends {
        assert_eq!((bs.errors, bs.ejected), (0, false), "{stats:?}");
    }
    assert!(stats.client_errors >= 6, "{stats:?}");
    // Both backends still take requests.
    let mut c = Client::connect(p.addr).await;
    let seen: Vec<usize> = (0..4).map(|_| 0).collect();
    let mut seen = seen;
    for s in seen.iter_mut() {
        *s = c.get("/").await.unwrap().backend();
    }
    assert!(seen.contains(&0) && seen.contains(&1), "{seen:?}");
}

#[tokio::test]
async fn malformed_chunked_body_is_a_400_client_error() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let out = raw(p.addr, MALFORMED_CHUNKED.as_bytes()).await;
    assert_eq!(statuses(&out), vec![400], "{out}");
    let stats = vip_stats(&p);
    assert_eq!(stats.client_errors, 1, "{stats:?}");
    assert_eq!(stats.backends[0].errors, 0, "{stats:?}");
}

#[tokio::test]
async fn slow_steady_upload_is_not_cut_by_backend_timeouts() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.timeouts.backend_header = Duration::from_millis(300);
    spec.options.timeouts.request = Duration::from_millis(300);
    let p = proxy(spec).await;
    let chunks = 8;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let head = format!("POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n", chunks * 4);
    s.write_all(head.as_bytes()).await.unwrap();
    for i in 0..chunks {
        tokio::time::sleep(Duration::from_millis(150)).await;
        s.write_all(format!("ab{i:02}").as_bytes()).await.unwrap();
    }
    let out = read_until_closed(&mut s, LIMIT).await.expect("answered");
    assert_eq!(statuses(&out), vec![200], "{out}");
    assert!(out.ends_with("ab00ab01ab02ab03ab04ab05ab06ab07"), "{out}");
}

#[tokio::test]
async fn round_robin_shares_are_even_with_one_backend_down_and_follow_weights() {
    let b = backends(3).await;
    let p = proxy(http_spec(&b)).await;
    p.handle.set_backend_health("web", b[1].addr, false).unwrap();
    let mut c = Client::connect(p.addr).await;
    let mut counts = [0usize; 3];
    for _ in 0..301 {
        counts[c.get("/").await.unwrap().backend()] += 1;
    }
    assert_eq!(counts[1], 0);
    assert!(counts[0].abs_diff(counts[2]) <= 1, "{counts:?}");

    // Weights count without choosing a weighted algorithm.
    let mut spec = http_spec(&b);
    spec.backends[0].weight = 3;
    spec.backends[1].weight = 0;
    let p = proxy(spec).await;
    let mut c = Client::connect(p.addr).await;
    let mut counts = [0usize; 3];
    for _ in 0..400 {
        counts[c.get("/").await.unwrap().backend()] += 1;
    }
    assert_eq!(counts, [300, 0, 100]);
}

#[tokio::test]
async fn smuggling_guard_holds_after_upgrade_headers_and_past_128_fields() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.limits.max_headers = 400;
    spec.options.limits.max_header_bytes = 64 * 1024;
    let p = proxy(spec).await;
    let smuggle = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /bytes/5 HTTP/1.1\r\nHost: x\r\n\r\n";
    // A first request that names Upgrade (but is no upgrade) used to switch the guard off.
    let req = format!("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: foo\r\n\r\n{smuggle}");
    assert_eq!(statuses(&raw(p.addr, req.as_bytes()).await), vec![200, 400]);
    // More fields than the guard parsed at once.
    let many: String = (0..150).map(|i| format!("X-F{i}: v\r\n")).collect();
    let req = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\n{many}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    );
    assert_eq!(statuses(&raw(p.addr, req.as_bytes()).await), vec![400]);
    // Repeated Content-Length, even when equal (RFC 9112 §6.3).
    let req = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc";
    assert_eq!(statuses(&raw(p.addr, req.as_bytes()).await), vec![400]);
    // CL + TE on a request that asks for an upgrade.
    let req = "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(statuses(&raw(p.addr, req.as_bytes()).await), vec![400]);
    assert_eq!(b[0].hits(), 1, "only the clean first request reaches the backend");
}

#[tokio::test]
async fn a_backend_that_stalls_mid_body_is_cut_and_blamed() {
    let stall = stalling_backend(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789").await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![lb_proxy::BackendSpec::new(stall.addr)];
    spec.options.timeouts.body = Duration::from_millis(300);
    let p = proxy(spec).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let out = read_until_closed(&mut s, Duration::from_secs(5)).await;
    let out = out.expect("the stalled response must end, not hang");
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.len() < 1000, "the body cannot be complete: {out}");
    assert_eq!(vip_stats(&p).backends[0].errors, 1);
}

#[tokio::test]
async fn an_idle_upgraded_tunnel_is_closed() {
    let ws = stalling_backend(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: foo\r\n\r\n").await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![lb_proxy::BackendSpec::new(ws.addr)];
    spec.options.timeouts.tunnel = Duration::from_millis(300);
    let p = proxy(spec).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: foo\r\n\r\n").await.unwrap();
    let out = read_until_closed(&mut s, Duration::from_secs(5)).await;
    let out = out.expect("a silent tunnel must be closed");
    assert_eq!(statuses(&out), vec![101], "{out}");
}

#[tokio::test]
async fn slowloris_is_answered_408_and_counted() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.timeouts.client_header = Duration::from_millis(300);
    let p = proxy(spec).await;
    let out = raw(p.addr, b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ").await;
    assert_eq!(statuses(&out), vec![408], "{out}");
    // Also on a kept-alive connection, for the second request's head.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHo").await.unwrap();
    let out = read_until_closed(&mut s, LIMIT).await.unwrap();
    assert_eq!(statuses(&out), vec![200, 408], "{out}");
    assert_eq!(vip_stats(&p).client_timeouts, 2);
}

#[tokio::test]
async fn trusted_forwarded_lines_are_joined_in_order() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.forwarded = ForwardedHeaders { x_forwarded: true, forwarded: true, trust_incoming: true };
    let p = proxy(spec).await;
    let req = "GET /headers HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\
               X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-For: 198.51.100.2, 198.51.100.3\r\n\
               Forwarded: for=198.51.100.1\r\nForwarded: for=198.51.100.2\r\n\r\n";
    let out = raw(p.addr, req.as_bytes()).await;
    assert!(out.contains("x-forwarded-for: 198.51.100.1, 198.51.100.2, 198.51.100.3, 127.0.0.1\n"), "{out}");
    assert!(out.contains("forwarded: for=198.51.100.1, for=198.51.100.2, for=127.0.0.1;host=h;proto=http\n"), "{out}");
}

#[tokio::test]
async fn host_rules_of_rfc_9112() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let missing = "GET /headers HTTP/1.1\r\nConnection: close\r\n\r\n";
    assert_eq!(statuses(&raw(p.addr, missing.as_bytes()).await), vec![400]);
    let twice = "GET /headers HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n";
    assert_eq!(statuses(&raw(p.addr, twice.as_bytes()).await), vec![400]);
    assert_eq!(b[0].hits(), 0);
    // HTTP/1.0 needs no Host.
    let old = "GET /headers HTTP/1.0\r\n\r\n";
    let out = raw(p.addr, old.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.0 200"), "{out}");
    let absolute = "GET http://example.org:8080/headers HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n";
    let out = raw(p.addr, absolute.as_bytes()).await;
    assert!(out.contains("GET /headers HTTP/1.1\n"), "{out}");
    assert!(out.contains("host: example.org:8080\n") && !out.contains("other"), "{out}");
    let named = "GET /headers HTTP/1.1\r\nHost: kept\r\nConnection: close, host\r\n\r\n";
    let out = raw(p.addr, named.as_bytes()).await;
    assert!(out.contains("host: kept\n"), "{out}");
}

#[tokio::test]
async fn keep_alive_idle_time_follows_idle_not_the_header_timeout() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.timeouts.idle = Duration::from_millis(300);
    spec.options.timeouts.client_header = Duration::from_secs(10);
    let p = proxy(spec).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let out = read_until_closed(&mut s, Duration::from_secs(3)).await;
    let out = out.expect("an idle keep-alive connection is closed after `idle`");
    assert_eq!(statuses(&out), vec![200]);

    let mut spec = http_spec(&b);
    spec.options.timeouts.idle = Duration::from_secs(10);
    spec.options.timeouts.client_header = Duration::from_millis(300);
    let p = proxy(spec).await;
    let mut c = Client::connect(p.addr).await;
    assert_eq!(c.get("/").await.unwrap().status, 200);
    tokio::time::sleep(Duration::from_millis(900)).await;
    let again = c.get("/").await;
    assert_eq!(again.map(|g| g.status).ok(), Some(200), "idle < `idle`: still open");
}

#[tokio::test]
async fn a_backend_that_stops_reading_an_upload_is_cut() {
    // Reads the request head, then neither reads nor answers, keeping the connection.
    let l = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = l.local_addr().unwrap();
    let _backend = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
            held.push(s);
        }
    });
    let mut spec = http_spec(&[]);
    spec.backends = vec![lb_proxy::BackendSpec::new(addr)];
    spec.options.timeouts.body = Duration::from_millis(300);
    spec.options.retries.max = 0;
    let p = proxy(spec).await;
    let len = 64 * 1024 * 1024;
    let s = TcpStream::connect(p.addr).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        let head = format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n");
        w.write_all(head.as_bytes()).await?;
        let chunk = vec![b'u'; 64 * 1024];
        for _ in 0..len / chunk.len() {
            w.write_all(&chunk).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        while !out.windows(4).any(|w| w == b"\r\n\r\n") {
            match tokio::io::AsyncReadExt::read(&mut r, &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    writer.abort();
    assert!(read.is_ok(), "the upload to a backend that stopped reading must end");
    let out = String::from_utf8_lossy(&out);
    assert_eq!(statuses(&out), vec![504], "{out}");
}

#[tokio::test]
async fn a_client_that_stops_reading_its_response_is_cut_and_frees_the_backend() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.timeouts.send = Duration::from_millis(300);
    let p = proxy(spec).await;
    // 64 MiB streamed: far more than every socket buffer on the way can hold. The client asks
    // for it on a small receive buffer and never reads.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(16 * 1024).unwrap();
    let mut stuck = sock.connect(p.addr).await.unwrap();
    stuck.write_all(b"GET /chunked/65536 HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let stats = cut_and_freed(&p).await;
    assert_eq!(stats.backends[0].errors, 0, "not the backend's fault: {stats:?}");
    // What the proxy had sent is still delivered, then the connection ends short of the body.
    let out = read_until_closed(&mut stuck, LIMIT).await.expect("the connection must end");
    assert!(out.starts_with("HTTP/1.1 200"), "{}", &out[..out.len().min(200)]);
    assert!(out.len() < 64 * 1024 * 1024, "the body cannot be complete");

    // A client that reads slowly but steadily, on a small receive buffer and with pauses
    // shorter than the limit, gets it all.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(16 * 1024).unwrap();
    let mut slow = sock.connect(p.addr).await.unwrap();
    slow.write_all(b"GET /bytes/1048576 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        match tokio::time::timeout(LIMIT, tokio::io::AsyncReadExt::read(&mut slow, &mut buf)).await {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            other => panic!("slow reader: {other:?}"),
        }
    }
    let at = got.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
    assert_eq!(got[at..], pattern(1024 * 1024)[..], "the slow reader gets the whole body");
    assert_eq!(vip_stats(&p).client_timeouts, 1);
}

#[tokio::test]
async fn an_h2_client_that_stops_taking_a_stream_is_cut_and_frees_the_backend() {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.timeouts.send = Duration::from_millis(300);
    let p = proxy(spec).await;
    let stream = TcpStream::connect(p.addr).await.unwrap();
    // A 64 KiB window that is widened only as the body is read: this client never reads it.
    let (mut sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(65_535)
        .handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let get = |path: &str| {
        hyper::Request::get(format!("http://test.local{path}")).body(Full::<bytes::Bytes>::default()).unwrap()
    };
    let stuck = sender.send_request(get("/chunked/65536")).await.unwrap();
    assert_eq!(stuck.status(), 200);
    let stats = cut_and_freed(&p).await;
    assert_eq!(stats.backends[0].errors, 0, "not the backend's fault: {stats:?}");
    // The stream is reset when the client reads on; the connection serves other streams.
    let body = stuck.into_body().collect().await;
    assert!(body.is_err(), "a cut stream cannot end as if complete");
    let resp = sender.send_request(get("/bytes/200000")).await.unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(body[..] == pattern(200_000)[..], "a stream read as it comes is served whole");
    assert_eq!(vip_stats(&p).client_timeouts, 1);
}

#[tokio::test]
async fn an_h2_stream_waiting_for_its_backend_is_not_the_clients_stall() {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let stall = stalling_backend(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789").await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![lb_proxy::BackendSpec::new(stall.addr)];
    spec.options.timeouts.send = Duration::from_millis(200);
    spec.options.timeouts.body = Duration::from_millis(1000);
    let p = proxy(spec).await;
    let stream = TcpStream::connect(p.addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get("http://test.local/").body(Full::<bytes::Bytes>::default()).unwrap();
    let resp = sender.send_request(req).await.unwrap();
    // The client reads all it is given; the backend goes silent after 10 bytes.
    let body = tokio::time::timeout(LIMIT, resp.into_body().collect()).await.expect("the stalled body must end");
    assert!(body.is_err(), "a body cut short cannot end as if complete");
    let stats = vip_stats(&p);
    assert_eq!((stats.client_timeouts, stats.backends[0].errors), (0, 1), "the backend's silence: {stats:?}");
}
