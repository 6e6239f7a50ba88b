//! h2 clients as the h2 crate's own client sees the proxy: a stream reset while its backend
//! is awaited, a connection whose client answers no ping, a busy one that is not pinged,
//! CONNECT, a declared body length, a graceful stop with a stream open, the flow-control window
//! `limits.h2_window_bytes` grants.
mod common;

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

async fn h2_client(p: &TestProxy) -> (h2::client::SendRequest<Bytes>, h2::client::Connection<TcpStream, Bytes>) {
    let stream = TcpStream::connect(p.addr).await.unwrap();
    let (send, conn) = h2::client::handshake(stream).await.unwrap();
    (send.ready().await.unwrap(), conn)
}

fn get(path: &str) -> http::Request<()> {
    http::Request::get(format!("http://test.local{path}")).body(()).unwrap()
}

/// Waits (at most 10 s) until the backend's active requests are `n`.
async fn active_becomes(p: &TestProxy, n: u64) -> bool {
    let wait = async {
        while p.handle.stats()[0].backends[0].active != n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait).await.is_ok()
}

#[tokio::test]
async fn a_client_reset_while_the_backend_is_awaited_cancels_the_backend_request() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let (mut send, conn) = h2_client(&p).await;
    tokio::spawn(conn);
    // The backend answers after 30 s: only the reset can end the exchange before.
    let (resp, mut stream) = send.send_request(get("/slow/30000"), true).unwrap();
    assert!(active_becomes(&p, 1).await, "the request reached its backend");
    stream.send_reset(h2::Reason::CANCEL);
    assert!(active_becomes(&p, 0).await, "the reset freed the backend: {:?}", p.handle.stats());
    assert!(resp.await.is_err());
    // The connection serves on.
    let mut send = send.ready().await.unwrap();
    let (resp, _) = send.send_request(get("/bytes/10"), true).unwrap();
    let resp = tokio::time::timeout(LIMIT, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(p.handle.stats()[0].backends[0].errors, 0, "not the backend's fault");
}

#[tokio::test]
async fn a_client_that_answers_no_ping_is_closed_and_one_that_does_is_kept() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.timeouts.idle = Duration::from_millis(200);
    // A wait for the answer long enough for a loaded machine: the first ping's wait ends
    // 1.2 s in, well within the 2.5 s the silent client waits.
    spec.options.timeouts.client_header = Duration::from_millis(1000);
    let p = proxy(spec).await;
    // Answers pings (its connection is polled throughout): kept well past a ping's wait.
    let (send, conn) = h2_client(&p).await;
    let kept = tokio::spawn(conn);
    // Answers none: its connection is not polled for a while.
    let (_silent_send, mut silent) = h2_client(&p).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // Polled again, the silent client finds its connection closed by the proxy.
    let ended = tokio::time::timeout(LIMIT, &mut silent).await;
    assert!(ended.is_ok(), "the proxy closed the connection of a client that answered no ping");
    assert!(!kept.is_finished(), "a client that answers pings keeps its connection");
    let mut send = send.ready().await.unwrap();
    let (resp, _) = send.send_request(get("/bytes/10"), true).unwrap();
    assert_eq!(tokio::time::timeout(LIMIT, resp).await.unwrap().unwrap().status(), 200);
}

#[tokio::test]
async fn a_client_heard_from_is_not_pinged_and_a_quiet_one_is() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.timeouts.idle = Duration::from_millis(300);
    let p = proxy(spec).await;
    let (io, pings) = CountPings::new(TcpStream::connect(p.addr).await.unwrap());
    let (send, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let mut send = send.ready().await.unwrap();
    // Requests one after another for several idle intervals: none of them is silent.
    let busy_until = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < busy_until {
        let (resp, _) = send.send_request(get("/bytes/10"), true).unwrap();
        assert_eq!(tokio::time::timeout(LIMIT, resp).await.unwrap().unwrap().status(), 200);
        send = send.ready().await.unwrap();
    }
    assert_eq!(pings.load(Relaxed), 0, "a client heard from in every interval was pinged");
    // Quiet, it is pinged.
    let pinged = async {
        while pings.load(Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert!(tokio::time::timeout(LIMIT, pinged).await.is_ok(), "a quiet client was not pinged");
}

/// A client's socket that counts the PINGs the proxy sends it (frames of type 6 without the
/// ACK flag), read from the bytes as they pass: the h2 crate answers them unseen.
struct CountPings {
    io: TcpStream,
    /// Bytes read and not yet taken as whole frames.
    pending: Vec<u8>,
    pings: Arc<AtomicUsize>,
}

impl CountPings {
    fn new(io: TcpStream) -> (Self, Arc<AtomicUsize>) {
        let pings = Arc::new(AtomicUsize::new(0));
        (CountPings { io, pending: Vec::new(), pings: pings.clone() }, pings)
    }
}

impl AsyncRead for CountPings {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        let this = &mut *self;
        this.pending.extend_from_slice(&buf.filled()[before..]);
        // Each frame: a 9-byte header (length 3 bytes, type, flags, stream), then its payload.
        while this.pending.len() >= 9 {
            let len = u32::from_be_bytes([0, this.pending[0], this.pending[1], this.pending[2]]) as usize;
            if this.pending.len() < 9 + len {
                break;
            }
            if this.pending[3] == 6 && this.pending[4] & 1 == 0 {
                this.pings.fetch_add(1, Relaxed);
            }
            this.pending.drain(..9 + len);
        }
        r
    }
}

impl AsyncWrite for CountPings {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[tokio::test]
async fn connect_is_refused_405_before_any_backend() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let (mut send, conn) = h2_client(&p).await;
    tokio::spawn(conn);
    let req = http::Request::connect("test.local:443").body(()).unwrap();
    let (resp, _tunnel) = send.send_request(req, false).unwrap();
    let resp = tokio::time::timeout(LIMIT, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(b[0].hits(), 0);
}

#[tokio::test]
async fn a_client_reset_while_the_body_is_awaited_frees_the_backend() {
    // The backend sends its head and 10 bytes of 1000, then goes silent.
    let stall = stalling_backend(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789").await;
    let mut spec = http_spec(&[]);
    spec.backends = vec![lb_proxy::BackendSpec::new(stall.addr)];
    spec.options.timeouts.body = Duration::from_secs(30);
    let p = proxy(spec).await;
    let (mut send, conn) = h2_client(&p).await;
    tokio::spawn(conn);
    let (resp, _) = send.send_request(get("/"), true).unwrap();
    let resp = tokio::time::timeout(LIMIT, resp).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    assert_eq!(body.data().await.unwrap().unwrap(), "0123456789");
    assert_eq!(p.handle.stats()[0].backends[0].active, 1);
    // Dropping the body's handle resets the stream (CANCEL).
    drop(body);
    assert!(active_becomes(&p, 0).await, "the reset freed the backend: {:?}", p.handle.stats());
}

#[tokio::test]
async fn a_declared_length_over_the_body_limit_is_refused_before_any_backend() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.limits.max_body_bytes = std::num::NonZeroU64::new(1000);
    let p = proxy(spec).await;
    let (mut send, conn) = h2_client(&p).await;
    tokio::spawn(conn);
    let mut post = |len: usize| {
        let req = http::Request::post("http://test.local/echo").header("content-length", len).body(()).unwrap();
        let (resp, mut body) = send.send_request(req, false).unwrap();
        body.send_data(Bytes::from(vec![b'x'; len]), true).unwrap();
        resp
    };
    let resp = tokio::time::timeout(LIMIT, post(1001)).await.unwrap().unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(b[0].hits(), 0, "refused on its declared length, before a backend was asked");
    let resp = tokio::time::timeout(LIMIT, post(1000)).await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(b[0].hits(), 1);
}

#[tokio::test]
async fn an_h2_client_that_sends_no_preface_is_closed_after_the_head_timeout() {
    use tokio::io::AsyncReadExt;

    let ca = common::tls::Ca::new();
    let leaf = ca.leaf("a", &["a.test"]);
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.tls = Some(common::tls::termination(&leaf, &["h2"]));
    spec.options.timeouts.client_header = Duration::from_millis(300);
    let p = proxy(spec).await;
    // ALPN chose h2; the client then sends nothing.
    let mut s = common::tls::connect(ca.client_config(&["h2"]), p.addr, "a.test").await.unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut out = Vec::new();
    let closed = tokio::time::timeout(LIMIT, s.read_to_end(&mut out)).await;
    assert!(closed.is_ok(), "the proxy closed the connection");
}

#[tokio::test]
async fn a_graceful_stop_lets_the_open_stream_finish() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let (mut send, conn) = h2_client(&p).await;
    tokio::spawn(conn);
    let (resp, _) = send.send_request(get("/slow/500"), true).unwrap();
    assert!(active_becomes(&p, 1).await, "the request reached its backend");
    let handle = p.handle.clone();
    let stopping = tokio::spawn(async move { handle.shutdown(Duration::from_secs(10)).await });
    // The stream open when the stop came (the connection's task polls it, not a task of its
    // own) is answered in full before the connection closes.
    let resp = tokio::time::timeout(LIMIT, resp).await.unwrap().expect("the open stream is answered");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = tokio::time::timeout(LIMIT, body.data()).await.unwrap() {
        let chunk = chunk.expect("the body comes whole");
        body.flow_control().release_capacity(chunk.len()).unwrap();
        got.extend_from_slice(&chunk);
    }
    assert_eq!(got, b"slow");
    tokio::time::timeout(LIMIT, stopping).await.unwrap().unwrap();
    assert!(p.handle.stats().is_empty());
}

#[tokio::test]
async fn a_client_may_send_as_much_body_ahead_as_h2_window_bytes() {
    for window in [100_000u32, 300_000] {
        let b = backends(1).await;
        let mut spec = http_spec(&b);
        spec.options.limits.h2_window_bytes = window;
        let p = proxy(spec).await;
        let (mut send, conn) = h2_client(&p).await;
        tokio::spawn(conn);
        let req = http::Request::post("http://test.local/echo").body(()).unwrap();
        let (_resp, mut body) = send.send_request(req, false).unwrap();
        // More than any window: the grant is what the proxy's SETTINGS (the stream's window)
        // and its WINDOW_UPDATE (the connection's) allow, and grows as they arrive.
        body.reserve_capacity(4 << 20);
        let granted = async {
            while body.capacity() < window as usize {
                std::future::poll_fn(|cx| body.poll_capacity(cx)).await.unwrap().unwrap();
            }
            body.capacity()
        };
        let granted = tokio::time::timeout(LIMIT, granted).await.expect("the window is granted");
        assert_eq!(granted, window as usize, "the connection's window");
        assert_eq!(initial_window_size(&p).await, window, "each stream's window");
    }
}

/// SETTINGS_INITIAL_WINDOW_SIZE of the proxy's first SETTINGS frame (RFC 9113 §6.5.2), read
/// off the wire: the h2 client does not tell a peer's settings.
async fn initial_window_size(p: &TestProxy) -> u32 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // The preface, then an empty SETTINGS frame (length 0, type 4, no flags, stream 0).
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
    let read = async {
        loop {
            let mut head = [0u8; 9];
            s.read_exact(&mut head).await.unwrap();
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            s.read_exact(&mut payload).await.unwrap();
            // A SETTINGS frame that is not an acknowledgement: six bytes a setting.
            if head[3] == 4 && head[4] & 1 == 0 {
                let setting = payload.chunks(6).find(|c| c[..2] == [0, 4]);
                // Absent: the protocol's default.
                return setting.map_or(65_535, |c| u32::from_be_bytes([c[2], c[3], c[4], c[5]]));
            }
        }
    };
    tokio::time::timeout(LIMIT, read).await.expect("the proxy's SETTINGS")
}
