//! HTTP forwarding: bodies, headers, keep-alive pooling, h2c, upgrades.
mod common;

use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use common::*;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::Request;
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use lb_proxy::{ForwardedHeaders, ProxyProtocol};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn forwards_and_streams_bodies_byte_exact() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let mut c = Client::connect(p.addr).await;
    for len in [0usize, 1, 1024, 300 * 1024, 3 * 1024 * 1024] {
        let g = c.get(&format!("/bytes/{len}")).await.unwrap();
        assert_eq!(g.status, 200);
        assert_eq!(g.body.len(), len);
        assert!(g.body[..] == pattern(len)[..], "body of {len} bytes differs");
    }
    // A chunked response (no length) of 2 MiB, streamed through.
    let g = c.get("/chunked/2048").await.unwrap();
    assert_eq!(g.body.len(), 2048 * 1024);
    assert!(g.body[..] == pattern(2048 * 1024)[..]);
}

#[tokio::test]
async fn streams_a_large_chunked_upload() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let stream = TcpStream::connect(p.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    // 4 MiB in 64 KiB frames with no Content-Length: sent chunked, must arrive intact.
    let data = pattern(4 * 1024 * 1024);
    let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> =
        data.chunks(64 * 1024).map(|c| Ok(Frame::data(Bytes::copy_from_slice(c)))).collect();
    let body = StreamBody::new(futures_util::stream::iter(frames));
    let req = Request::post("/echo").header("host", "t").body(body).unwrap();
    let resp = tokio::time::timeout(LIMIT, sender.send_request(req)).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    let got = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(got.len(), data.len());
    assert!(got[..] == data[..]);
}

#[tokio::test]
async fn keep_alive_on_both_sides_reuses_backend_connections() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let mut c = Client::connect(p.addr).await;
    for _ in 0..50 {
        assert_eq!(c.get("/bytes/10").await.unwrap().status, 200);
    }
    // Sequential requests ride one pooled backend connection.
    assert_eq!(b[0].hits(), 50);
    assert_eq!(b[0].conns.load(Relaxed), 1, "backend connections must be pooled");
}

#[tokio::test]
async fn adds_forwarded_headers_and_removes_hop_by_hop() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.forwarded = ForwardedHeaders { x_forwarded: true, forwarded: true, trust_incoming: false };
    let p = proxy(spec).await;
    let req = Request::get("/headers")
        .header("host", "example.org")
        .header("x-forwarded-for", "6.6.6.6")
        .header("connection", "x-private")
        .header("x-private", "secret")
        .header("keep-alive", "timeout=9")
        .header("x-end-to-end", "kept")
        .body(Full::default())
        .unwrap();
    let g = Client::connect(p.addr).await.send(req).await.unwrap();
    let text = g.text();
    assert!(text.starts_with("GET /headers HTTP/1.1"), "{text}");
    assert!(text.contains("x-forwarded-for: 127.0.0.1\n"), "spoofed XFF must be replaced: {text}");
    assert!(text.contains("x-forwarded-proto: http\n"), "{text}");
    assert!(text.contains("x-forwarded-host: example.org\n"), "{text}");
    assert!(text.contains("forwarded: for=127.0.0.1;host=example.org;proto=http\n"), "{text}");
    assert!(text.contains("x-end-to-end: kept\n"), "{text}");
    assert!(!text.contains("x-private"), "Connection-named header leaked: {text}");
    assert!(!text.contains("keep-alive"), "{text}");
}

/// A backend response's hop-by-hop fields, and those its Connection names, stop at the
/// proxy; its other fields reach the client in order, names lower-case, its Date kept (one
/// added where it sent none), both to an HTTP/1 client (written straight from the backend's
/// head) and to an h2 client.
#[tokio::test]
async fn response_hop_by_hop_fields_stop_at_the_proxy() {
    const REPLY: &[u8] = b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nKeep-Alive: timeout=5\r\nX-Kept: yes\r\nProxy-Connection: keep-alive\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\nSet-Cookie: b=2\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
    const NAMING: &[u8] =
        b"HTTP/1.1 200 OK\r\nConnection: X-Private\r\nX-Private: secret\r\nX-Kept: yes\r\nContent-Length: 2\r\n\r\nok";
    for (reply, gone) in [(REPLY, &["keep-alive", "proxy-connection"][..]), (NAMING, &["x-private"])] {
        let b = raw_backend(reply).await;
        let mut spec = http_spec(&[]);
        spec.backends = vec![lb_proxy::BackendSpec::new(b.addr)];
        let p = proxy(spec).await;
        let got = raw(p.addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        let lower = got.to_lowercase();
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n") && got.ends_with("\r\n\r\nok"), "{got}");
        for name in gone {
            assert!(!lower.contains(name), "{name} leaked: {got}");
        }
        assert!(got.contains("x-kept: yes\r\n"), "{got}");
        assert!(got.contains("content-length: 2\r\n"), "{got}");
        assert_eq!(lower.matches("connection: ").count(), 1, "the proxy's own Connection only: {got}");
        if reply == REPLY {
            assert!(
                got.contains(
                    "set-cookie: a=1\r\nx-kept: yes\r\ndate: Tue, 01 Dec 2026 10:00:00 GMT\r\nset-cookie: b=2\r\n"
                ),
                "{got}"
            );
            assert_eq!(got.matches("date: ").count(), 1, "the backend's Date only: {got}");
        }
        // h2: the same fields, through hyper's map.
        let stream = TcpStream::connect(p.addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        let resp =
            sender.send_request(Request::get("http://x/").body(Full::<Bytes>::default()).unwrap()).await.unwrap();
        let h = resp.headers();
        assert_eq!(h["x-kept"], "yes");
        for name in ["keep-alive", "proxy-connection", "connection", "x-private"] {
            assert!(!h.contains_key(name), "{name} leaked to h2: {h:?}");
        }
        // One Date (the backend's, else the proxy's) and the backend's Content-Length.
        assert_eq!(h.get_all("date").iter().count(), 1, "{h:?}");
        assert_eq!(h.get_all("content-length").iter().collect::<Vec<_>>(), ["2"]);
        if reply == REPLY {
            assert_eq!(h.get_all("set-cookie").iter().collect::<Vec<_>>(), ["a=1", "b=2"]);
            assert_eq!(h["date"], "Tue, 01 Dec 2026 10:00:00 GMT");
        }
    }
}

#[tokio::test]
async fn h2c_prior_knowledge_clients_are_served() {
    let b = backends(2).await;
    let p = proxy(http_spec(&b)).await;
    let stream = TcpStream::connect(p.addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    // Concurrent streams on one h2 connection, each byte-exact.
    let mut set = tokio::task::JoinSet::new();
    for i in 0..20usize {
        let mut s = sender.clone();
        set.spawn(async move {
            let len = 1000 + i * 7919;
            let req = Request::get(format!("http://test.local/bytes/{len}")).body(Full::<Bytes>::default()).unwrap();
            let resp = s.send_request(req).await.unwrap();
            assert_eq!(resp.version(), hyper::Version::HTTP_2);
            assert_eq!(resp.status(), 200);
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert!(body[..] == pattern(len)[..]);
        });
    }
    let all = async {
        while let Some(r) = set.join_next().await {
            r.unwrap()
        }
    };
    tokio::time::timeout(LIMIT, all).await.unwrap();
    // The backend saw HTTP/1.1 with a Host header taken from :authority.
    let mut s = sender.clone();
    let req = Request::get("http://test.local/headers").body(Full::<Bytes>::default()).unwrap();
    let text =
        String::from_utf8(s.send_request(req).await.unwrap().into_body().collect().await.unwrap().to_bytes().to_vec())
            .unwrap();
    assert!(text.starts_with("GET /headers HTTP/1.1"), "{text}");
    assert!(text.contains("host: test.local\n"), "{text}");
}

#[tokio::test]
async fn websocket_echo_through_the_proxy() {
    // A WebSocket echo backend.
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let ws_addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(s).await.unwrap();
                while let Some(Ok(m)) = ws.next().await {
                    if m.is_close() {
                        break;
                    }
                    if ws.send(m).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let mut spec = http_spec(&[]);
    spec.backends = vec![lb_proxy::BackendSpec::new(ws_addr)];
    let p = proxy(spec).await;
    let stream = TcpStream::connect(p.addr).await.unwrap();
    let (mut ws, resp) = tokio::time::timeout(LIMIT, tokio_tungstenite::client_async("ws://test.local/chat", stream))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 101);
    for i in 0..10 {
        let msg = format!("hello {i}");
        ws.send(Message::text(msg.clone())).await.unwrap();
        let back = tokio::time::timeout(LIMIT, ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(back, Message::text(msg));
    }
    let big = pattern(200_000);
    ws.send(Message::binary(big.clone())).await.unwrap();
    let back = tokio::time::timeout(LIMIT, ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(back.into_data().to_vec(), big);
    ws.close(None).await.unwrap();
}

#[tokio::test]
async fn proxy_protocol_v1_and_v2_reach_the_backend() {
    for (kind, expect) in [
        (ProxyProtocol::V1, &b"PROXY TCP4 127.0.0.1 127.0.0.1 "[..]),
        (ProxyProtocol::V2, &b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c"[..]),
    ] {
        // A backend that records the first bytes of its connection, then answers.
        let listener = TcpListener::bind(loopback()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") || got.len() < 60 {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                if got.windows(4).filter(|w| *w == b"\r\n\r\n").count() >= 2
                    || got.starts_with(b"PROXY") && got.windows(4).any(|w| w == b"\r\n\r\n")
                {
                    break;
                }
            }
            tx.send(got).await.unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.unwrap();
        });
        let mut spec = http_spec(&[]);
        spec.backends = vec![lb_proxy::BackendSpec::new(addr)];
        spec.options.proxy_protocol = kind;
        let p = proxy(spec).await;
        let mut c = Client::connect(p.addr).await;
        let g = c.get("/").await.unwrap();
        assert_eq!(g.status, 200);
        let got = tokio::time::timeout(LIMIT, rx.recv()).await.unwrap().unwrap();
        assert!(got.starts_with(expect), "{kind:?}: got {:?}", String::from_utf8_lossy(&got));
        let client_port = c_port(&got, kind);
        assert!(client_port > 0);
    }
}

/// The client port announced by the PROXY header.
fn c_port(got: &[u8], kind: ProxyProtocol) -> u16 {
    match kind {
        ProxyProtocol::V1 => {
            let line = String::from_utf8_lossy(got.split(|b| *b == b'\r').next().unwrap()).into_owned();
            line.split(' ').nth(4).unwrap().parse().unwrap()
        }
        _ => u16::from_be_bytes([got[24], got[25]]),
    }
}

/// `close_after_response`: two pipelined requests on one connection get one response, with
/// `Connection: close`, and the connection is closed; without it both are answered.
#[tokio::test]
async fn close_after_response_answers_once_and_closes() {
    let b = backends(1).await;
    let two = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut spec = http_spec(&b);
    spec.options.close_after_response = true;
    let closing = proxy(spec).await;
    let out = raw(closing.addr, two).await;
    assert_eq!(statuses(&out), vec![200], "{out}");
    assert!(out.to_ascii_lowercase().contains("connection: close"), "{out}");
    let keeping = proxy(http_spec(&b)).await;
    let mut s = tokio::net::TcpStream::connect(keeping.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut s, two).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while statuses(&String::from_utf8_lossy(&got)).len() < 2 {
        let n =
            tokio::time::timeout(std::time::Duration::from_secs(5), tokio::io::AsyncReadExt::read(&mut s, &mut buf))
                .await
                .expect("both responses in time")
                .unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body_is_sent() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let head =
        "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\n";
    s.write_all(head.as_bytes()).await.unwrap();
    let mut interim = [0u8; 25];
    tokio::time::timeout(LIMIT, s.read_exact(&mut interim)).await.unwrap().unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"hello").await.unwrap();
    let out = read_until_closed(&mut s, LIMIT).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.ends_with("\r\n\r\nhello"), "{out}");
    assert_eq!(out.matches("100 Continue").count(), 0, "the backend's own 100 is not passed on");
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let out = raw(
        p.addr,
        b"GET /status/201 HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc\
          GET /status/202 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&out), vec![201, 200, 202], "{out}");
    assert!(out.contains("\r\n\r\nabcHTTP/1.1 202"), "{out}");
}

#[tokio::test]
async fn a_client_that_leaves_mid_request_frees_the_backend() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /slow/5000 HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let active = || p.handle.stats()[0].backends[0].active;
    let deadline = tokio::time::Instant::now() + LIMIT;
    while active() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the request never reached the backend");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    drop(s);
    // Well before the backend's 5 s answer, the request is dropped with its backend slot.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(active(), 0, "the request of a client that left still holds the backend");
}
