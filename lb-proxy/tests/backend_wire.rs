//! The backend side of HTTP/1.1, byte by byte: a scripted backend answers each request head
//! with exact bytes (chunked with trailers, until close, interim responses, early answers,
//! stray bytes, malformed heads), and the tests check what the client gets, which backend
//! connections are reused, and what is counted against the backend.
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use hyper::Request;
use lb_proxy::BackendSpec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the scripted backend does after reading a request head.
struct Reply {
    bytes: Vec<u8>,
    then: Then,
}

/// What the backend does after writing a reply.
enum Then {
    /// Reads the next head.
    Next,
    /// Closes the connection.
    Close,
    /// Keeps the connection open and reads nothing more (a body sent after the head stays
    /// unread, as with a server that answered early).
    ReadNothing,
}

fn reply(bytes: &[u8]) -> Reply {
    Reply { bytes: bytes.to_vec(), then: Then::Next }
}

/// A keep-alive backend that answers each head (the text up to its blank line) with
/// `script(head, n)`, n counting the requests of the connection from 0, and counts its
/// connections. A request body is not read: heads that carry
/// one must be answered early or closed.
struct Scripted {
    spec: BackendSpec,
    conns: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn scripted(script: fn(&str, usize) -> Reply) -> Scripted {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicU64::new(0));
    let c = conns.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { continue };
            c.fetch_add(1, Relaxed);
            tokio::spawn(async move {
                let mut pending = Vec::new();
                let mut buf = [0u8; 4096];
                for n in 0.. {
                    // Searched from where the last search stopped: a body never read (after
                    // an early answer) must not cost a scan of all of it per read.
                    let mut scanned = 0;
                    let end = loop {
                        if let Some(i) = pending[scanned..].windows(4).position(|w| w == b"\r\n\r\n") {
                            break scanned + i + 4;
                        }
                        scanned = pending.len().saturating_sub(3);
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => pending.extend_from_slice(&buf[..n]),
                        }
                    };
                    let head: Vec<u8> = pending.drain(..end).collect();
                    let r = script(&String::from_utf8_lossy(&head), n);
                    if s.write_all(&r.bytes).await.is_err() {
                        return;
                    }
                    match r.then {
                        Then::Next => {}
                        Then::Close => return,
                        Then::ReadNothing => return std::future::pending().await,
                    }
                }
            });
        }
    });
    Scripted { spec: BackendSpec::new(addr), conns, task }
}

async fn proxy_to(backend: &Scripted) -> TestProxy {
    let mut spec = http_spec(&[]);
    spec.backends = vec![backend.spec.clone()];
    proxy(spec).await
}

fn backend_errors(p: &TestProxy) -> u64 {
    p.handle.stats()[0].backends[0].errors
}

#[tokio::test]
async fn chunked_responses_with_extensions_and_trailers_are_decoded_and_the_connection_reused() {
    let b = scripted(|_, _| {
        reply(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-sum: 1\r\n\r\n")
    })
    .await;
    let p = proxy_to(&b).await;
    let mut c = Client::connect(p.addr).await;
    for _ in 0..3 {
        let got = c.get("/").await.unwrap();
        assert_eq!((got.status, &got.body[..]), (200, &b"hello world"[..]));
    }
    assert_eq!(b.conns.load(Relaxed), 1, "one backend connection serves every request");
    assert_eq!(backend_errors(&p), 0);
}

#[tokio::test]
async fn a_body_delimited_by_close_is_read_whole_and_the_connection_not_reused() {
    let b = scripted(|_, _| Reply { bytes: b"HTTP/1.1 200 OK\r\n\r\nuntil the end".to_vec(), then: Then::Close }).await;
    let p = proxy_to(&b).await;
    let mut c = Client::connect(p.addr).await;
    for _ in 0..2 {
        let got = c.get("/").await.unwrap();
        assert_eq!((got.status, &got.body[..]), (200, &b"until the end"[..]));
    }
    assert_eq!(b.conns.load(Relaxed), 2);
    assert_eq!(backend_errors(&p), 0);
}

#[tokio::test]
async fn interim_responses_are_skipped_and_reason_phrases_kept() {
    let b = scripted(|_, _| reply(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 Fine Thanks\r\ncontent-length: 2\r\n\r\nok")).await;
    let p = proxy_to(&b).await;
    let got = raw(p.addr, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
    assert!(got.starts_with("HTTP/1.1 200 Fine Thanks\r\n"), "{got}");
    assert!(got.ends_with("\r\n\r\nok"), "{got}");
}

#[tokio::test]
async fn an_early_answer_to_an_upload_reaches_the_client_and_the_connection_is_not_reused() {
    // The backend answers 413 to the head and never reads the body: 32 MiB, more than the
    // sockets between proxy and backend hold (loopback's buffers grow to a few MiB), so the
    // proxy cannot have sent all of it when the answer comes, however the threads are
    // scheduled. (A body the buffers take whole is a request sent in full, whose connection
    // may rightly be reused: with 1 MiB read on by the backend, on one CPU it was.)
    let b = scripted(|head, _| {
        if head.starts_with("POST") {
            Reply {
                bytes: b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 3\r\n\r\nbig".to_vec(),
                then: Then::ReadNothing,
            }
        } else {
            reply(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        }
    })
    .await;
    let p = proxy_to(&b).await;
    let mut c = Client::connect(p.addr).await;
    let body = Bytes::from(vec![b'x'; 32 << 20]);
    let post = Request::post("/up").header("host", "x").body(Full::new(body)).unwrap();
    let got = c.send(post).await;
    // hyper's client may see the connection close before it finished sending; either way the
    // proxy must not hang, and a client that reads the answer gets 413.
    if let Ok(got) = got {
        assert_eq!((got.status, &got.body[..]), (413, &b"big"[..]));
    }
    assert_eq!(fetch(p.addr, "/").await.status, 200);
    assert_eq!(b.conns.load(Relaxed), 2, "the cut-short connection is not reused");
}

#[tokio::test]
async fn stray_bytes_after_a_response_retire_the_connection() {
    let b = scripted(|_, _| reply(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\noknot part of any response")).await;
    let p = proxy_to(&b).await;
    let mut c = Client::connect(p.addr).await;
    for _ in 0..2 {
        let got = c.get("/").await.unwrap();
        assert_eq!((got.status, &got.body[..]), (200, &b"ok"[..]));
    }
    assert_eq!(b.conns.load(Relaxed), 2);
}

#[tokio::test]
async fn a_pooled_connection_the_backend_closed_is_not_used() {
    // Every response promises keep-alive, then the backend closes after a moment.
    let b =
        scripted(|_, _| Reply { bytes: b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(), then: Then::Close })
            .await;
    let p = proxy_to(&b).await;
    let mut c = Client::connect(p.addr).await;
    for _ in 0..3 {
        assert_eq!(c.get("/").await.unwrap().status, 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(b.conns.load(Relaxed), 3);
    assert_eq!(backend_errors(&p), 0, "a closed idle connection is no backend failure");
}

#[tokio::test]
async fn malformed_responses_are_502_and_count_against_the_backend() {
    let b = scripted(|head, _| match head.split(' ').nth(1).unwrap_or("") {
        "/length" => reply(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok"),
        "/fold" => reply(b"HTTP/1.1 200 OK\r\nx-a: 1\r\n folded\r\ncontent-length: 2\r\n\r\nok"),
        "/chunk" => {
            Reply { bytes: b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec(), then: Then::Close }
        }
        _ => reply(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n"),
    })
    .await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![b.spec.clone()];
    spec.options.outlier.consecutive_failures = 0;
    let p = proxy(spec).await;
    for path in ["/length", "/fold", "/unasked-101"] {
        assert_eq!(fetch(p.addr, path).await.status, 502, "{path}");
    }
    // A bad chunk arrives after the head went out: the client sees its stream fail.
    assert!(Client::connect(p.addr).await.get("/chunk").await.is_err());
    assert_eq!(backend_errors(&p), 4);
}

#[tokio::test]
async fn a_reused_connection_closed_as_the_request_left_is_retried_only_for_replayable_requests() {
    // Each connection answers one request, then closes on reading the next head without a
    // byte of answer: a keep-alive timeout striking as a request arrives.
    let b = scripted(|_, n| {
        if n == 0 {
            reply(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        } else {
            Reply { bytes: Vec::new(), then: Then::Close }
        }
    })
    .await;
    let p = proxy_to(&b).await;
    let mut c = Client::connect(p.addr).await;
    for _ in 0..3 {
        assert_eq!(c.get("/").await.unwrap().status, 200);
    }
    assert_eq!(backend_errors(&p), 0, "a reused connection's close is no backend failure");
    assert_eq!(p.handle.stats()[0].retries, 0, "the same attempt goes on over a fresh connection");
    // A POST may have been acted on: it is not sent again.
    let post = Request::post("/p").header("host", "x").body(Full::new(Bytes::from_static(b"x"))).unwrap();
    assert_eq!(c.send(post).await.unwrap().status, 502);
    assert_eq!(b.conns.load(Relaxed), 3);
}

/// An HTTP/1 request's head reaches the backend field for field in the client's order, names
/// lower-case, less the hop-by-hop fields and those its Connection names (in any case) and the
/// client's own forwarding fields; the fields the proxy sets follow the client's.
#[tokio::test]
async fn a_request_head_reaches_the_backend_in_the_clients_order() {
    let b = scripted(|head, _| {
        let mut bytes = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", head.len()).into_bytes();
        bytes.extend_from_slice(head.as_bytes());
        Reply { bytes, then: Then::Next }
    })
    .await;
    let p = proxy_to(&b).await;
    let got = raw(
        p.addr,
        b"GET /a?b=1 HTTP/1.1\r\nX-B: 1\r\nHost: example.org\r\nConnection: X-Private, close\r\nX-A: 2\r\n\
          x-PRIVATE: secret\r\nX-B: 3\r\nTE: trailers\r\nX-Forwarded-Proto: spoofed\r\nKeep-Alive: 5\r\n\r\n",
    )
    .await;
    let (head, sent) = got.split_once("\r\n\r\n").expect("a whole response");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert_eq!(
        sent,
        "GET /a?b=1 HTTP/1.1\r\nx-b: 1\r\nhost: example.org\r\nx-a: 2\r\nx-b: 3\r\n\
         x-forwarded-for: 127.0.0.1\r\nx-forwarded-proto: http\r\nx-forwarded-host: example.org\r\n\r\n"
    );
}
