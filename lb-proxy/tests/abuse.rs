//! Bad input and abuse: smuggling attempts, oversized heads, slow clients, connection caps.
mod common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn content_length_with_transfer_encoding_is_rejected_in_either_order() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    for head in [
        "Content-Length: 48\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 48\r\n",
        "transfer-encoding: chunked\r\ncontent-length: 0\r\n",
    ] {
        // The classic CL.TE / TE.CL attempt: a second request hidden in the body.
        let req =
            format!("POST /echo HTTP/1.1\r\nHost: x\r\n{head}\r\n0\r\n\r\nGET /bytes/5 HTTP/1.1\r\nHost: x\r\n\r\n");
        let out = raw(p.addr, req.as_bytes()).await;
        assert_eq!(statuses(&out), vec![400], "{head:?}: {out}");
    }
    assert_eq!(b[0].hits(), 0, "nothing may reach the backend");
}

#[tokio::test]
async fn conflict_after_a_clean_request_with_a_body_is_found() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let req = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
               POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
               POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n";
    let out = raw(p.addr, req.as_bytes()).await;
    assert_eq!(statuses(&out), vec![200, 200, 400], "{out}");
    assert!(out.contains("hello") && out.contains("abc"));
    assert_eq!(b[0].hits(), 2);
}

#[tokio::test]
async fn other_framing_tricks_are_rejected() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    for (what, req) in [
        ("differing lengths", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
        ("non-chunked TE", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\nabcd"),
        ("obfuscated TE", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"),
        ("TE in HTTP/1.0", "POST /echo HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ("bad length", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nabcde"),
        ("space before colon", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nabcde"),
    ] {
        let out = raw(p.addr, req.as_bytes()).await;
        assert_eq!(statuses(&out), vec![400], "{what}: {out}");
    }
    assert_eq!(b[0].hits(), 0);
}

#[tokio::test]
async fn head_size_count_and_target_length_limits() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.limits.max_header_bytes = 8 * 1024;
    spec.options.limits.max_headers = 20;
    spec.options.limits.max_request_line = 1024;
    let p = proxy(spec).await;
    let big = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(9 * 1024));
    assert_eq!(statuses(&raw(p.addr, big.as_bytes()).await), vec![431]);
    let many: String = (0..30).map(|i| format!("X-H{i}: v\r\n")).collect();
    let many = format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    assert_eq!(statuses(&raw(p.addr, many.as_bytes()).await), vec![431]);
    let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "p".repeat(2000));
    assert_eq!(statuses(&raw(p.addr, long.as_bytes()).await), vec![414]);
    assert_eq!(b[0].hits(), 0);
    // Within the limits it works.
    let ok = format!("GET /{} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "p".repeat(900));
    assert_eq!(statuses(&raw(p.addr, ok.as_bytes()).await), vec![200]);
}

#[tokio::test]
async fn slow_client_is_cut_by_the_header_timeout() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.timeouts.client_header = Duration::from_millis(300);
    let p = proxy(spec).await;
    // Half a head, then silence (slow loris). `raw` panics if the proxy keeps waiting.
    let out = raw(p.addr, b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ").await;
    assert!(statuses(&out).iter().all(|s| *s == 408), "{out}");
    // A client that connects and sends nothing at all is cut too.
    let out = raw(p.addr, b"").await;
    assert!(out.is_empty() || statuses(&out) == vec![408], "{out}");
    assert_eq!(b[0].hits(), 0);
}

#[tokio::test]
async fn connection_cap_answers_503_and_frees_slots() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.limits.max_connections = 2;
    let p = proxy(spec).await;
    let mut c1 = Client::connect(p.addr).await;
    let mut c2 = Client::connect(p.addr).await;
    assert_eq!(c1.get("/").await.unwrap().status, 200);
    assert_eq!(c2.get("/").await.unwrap().status, 200);
    let out = raw(p.addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(statuses(&out), vec![503], "{out}");
    drop(c1);
    // The slot frees once the proxy sees the close (bounded wait).
    let mut served = false;
    for _ in 0..200 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut out)).await;
        if statuses(&String::from_utf8_lossy(&out)) == vec![200] {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(served, "a freed slot must be usable again");
    assert!(p.handle.stats()[0].rejected >= 1);
}
