//! Test fixtures: backends, clients and a proxy, all on 127.0.0.1 port 0.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use lb_proxy::{BackendSpec, Mode, Proxy, ProxyHandle, ProxyVipSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Every wait in the tests is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(20);

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// The byte at offset `i` of every generated body: position-dependent, so a shifted,
/// truncated or mixed-up body never compares equal.
pub fn pattern_byte(i: usize) -> u8 {
    (i.wrapping_mul(31).wrapping_add(i >> 8) % 251) as u8
}

pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(pattern_byte).collect()
}

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(b: impl Into<Bytes>) -> BoxBody {
    Full::new(b.into()).boxed()
}

/// A test backend (HTTP/1.1 keep-alive, hyper). Routes:
/// `/bytes/N` N pattern bytes · `/chunked/N` N KiB in 1 KiB chunks, no length ·
/// `/echo` the request body back, streamed · `/headers` the request head as text ·
/// `/status/N` that status · `/slow/MS` answers after MS ms.
/// Every response carries `x-backend: <id>`.
pub struct Backend {
    pub addr: SocketAddr,
    pub id: usize,
    /// Requests answered.
    pub hits: Arc<AtomicU64>,
    /// TCP connections accepted.
    pub conns: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Backend {
    pub async fn start(id: usize) -> Backend {
        let listener = TcpListener::bind(loopback()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicU64::new(0));
        let conns = Arc::new(AtomicU64::new(0));
        let (h, c) = (hits.clone(), conns.clone());
        let task = tokio::spawn(async move {
            // Aborting this task drops the set, which aborts every connection: a killed backend.
            let mut set = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                c.fetch_add(1, Relaxed);
                let h = h.clone();
                set.spawn(async move {
                    let svc = service_fn(move |req| {
                        let h = h.clone();
                        async move { Ok::<_, Infallible>(route(req, id, h).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades()
                        .await;
                });
                while set.try_join_next().is_some() {}
            }
        });
        Backend { addr, id, hits, conns, task }
    }

    pub fn spec(&self) -> BackendSpec {
        BackendSpec::new(self.addr)
    }

    /// Stops listening and cuts every open connection, like a killed process.
    pub async fn kill(&self) {
        self.task.abort();
        let _ = tokio::time::timeout(LIMIT, async {
            while !self.task.is_finished() {
                tokio::task::yield_now().await
            }
        })
        .await;
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Relaxed)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn route(req: Request<Incoming>, id: usize, hits: Arc<AtomicU64>) -> Response<BoxBody> {
    let path = req.uri().path().to_string();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (what, arg) = (parts.next().unwrap_or(""), parts.next().unwrap_or("0"));
    let n: usize = arg.parse().unwrap_or(0);
    let mut resp = match what {
        "bytes" => Response::new(full(pattern(n))),
        "chunked" => {
            let chunks = (0..n).map(|k| {
                let data: Vec<u8> = (k * 1024..(k + 1) * 1024).map(pattern_byte).collect();
                Ok::<_, Infallible>(Frame::data(Bytes::from(data)))
            });
            let stream = futures_util::stream::iter(chunks);
            Response::new(BodyExt::boxed(StreamBody::new(stream)))
        }
        "echo" => {
            let body = req.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
            Response::new(full(body))
        }
        "headers" => {
            let mut text = format!("{} {} {:?}\n", req.method(), req.uri(), req.version());
            for (k, v) in req.headers() {
                text.push_str(&format!("{}: {}\n", k, v.to_str().unwrap_or("?")));
            }
            Response::new(full(text))
        }
        "status" => {
            let mut r = Response::new(full(format!("status {n}")));
            *r.status_mut() = hyper::StatusCode::from_u16(n as u16).unwrap();
            r
        }
        "slow" => {
            tokio::time::sleep(Duration::from_millis(n as u64)).await;
            Response::new(full("slow"))
        }
        _ => Response::new(full("ok")),
    };
    hits.fetch_add(1, Relaxed);
    resp.headers_mut().insert("x-backend", id.to_string().parse().unwrap());
    resp
}

/// A misbehaving backend: on every connection it reads a request head, writes `reply`
/// (possibly nothing, or a truncated response) and closes.
pub struct RawBackend {
    pub addr: SocketAddr,
    /// Request heads read.
    pub heads: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawBackend {
    pub fn heads(&self) -> u64 {
        self.heads.load(Relaxed)
    }
}

pub async fn raw_backend(reply: &'static [u8]) -> RawBackend {
    serve_raw(reply, false).await
}

/// A backend that reads a request head, writes `reply`, then holds the connection open
/// without a further byte until the proxy closes it (a hung backend, or a silent tunnel).
pub async fn stalling_backend(reply: &'static [u8]) -> RawBackend {
    serve_raw(reply, true).await
}

async fn serve_raw(reply: &'static [u8], hold: bool) -> RawBackend {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(AtomicU64::new(0));
    let h = heads.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            let h = h.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                h.fetch_add(1, Relaxed);
                let _ = s.write_all(reply).await;
                if hold {
                    // Bounded: a test never waits longer than LIMIT anyway.
                    let _ = tokio::time::timeout(LIMIT * 2, async {
                        while let Ok(n) = s.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                        }
                    })
                    .await;
                }
            });
        }
    });
    RawBackend { addr, heads, task }
}

/// An address where nothing listens (bound once, then released).
pub async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind(loopback()).await.unwrap();
    l.local_addr().unwrap()
}

pub async fn backends(n: usize) -> Vec<Backend> {
    let mut v = Vec::new();
    for id in 0..n {
        v.push(Backend::start(id).await);
    }
    v
}

/// A proxy serving one VIP on 127.0.0.1 port 0.
pub struct TestProxy {
    pub handle: ProxyHandle,
    pub addr: SocketAddr,
}

pub async fn proxy(mut spec: ProxyVipSpec) -> TestProxy {
    spec.listen = loopback();
    let listener = TcpListener::bind(spec.listen).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = Proxy::start_with_listeners(vec![(spec, listener)]).unwrap();
    TestProxy { handle, addr }
}

pub fn http_spec(backends: &[Backend]) -> ProxyVipSpec {
    let mut spec = ProxyVipSpec::new("web", loopback(), Mode::Http);
    spec.backends = backends.iter().map(Backend::spec).collect();
    spec
}

/// A simple response, fully read.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Got {
    pub fn backend(&self) -> usize {
        self.headers["x-backend"].to_str().unwrap().parse().unwrap()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A keep-alive HTTP/1.1 client connection.
pub struct Client {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        Client { sender }
    }

    pub async fn send(&mut self, req: Request<Full<Bytes>>) -> Result<Got, hyper::Error> {
        let fut = async {
            self.sender.ready().await?;
            let resp = self.sender.send_request(req).await?;
            let (parts, body) = resp.into_parts();
            let body = body.collect().await?.to_bytes();
            Ok(Got { status: parts.status.as_u16(), headers: parts.headers, body })
        };
        tokio::time::timeout(LIMIT, fut).await.expect("request did not finish in time")
    }

    pub async fn get(&mut self, path: &str) -> Result<Got, hyper::Error> {
        self.send(get(path)).await
    }
}

pub fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path).header("host", "test.local").body(Full::default()).unwrap()
}

/// One GET on a fresh connection; panics on transport errors.
pub async fn fetch(addr: SocketAddr, path: &str) -> Got {
    Client::connect(addr).await.get(path).await.unwrap()
}

/// Writes raw bytes, then reads until the peer closes; panics if it does not within LIMIT.
pub async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let r = tokio::time::timeout(LIMIT, s.read_to_end(&mut out)).await;
    assert!(r.is_ok(), "the proxy kept the connection open; got so far: {:?}", String::from_utf8_lossy(&out));
    String::from_utf8_lossy(&out).into_owned()
}

/// The status codes of the responses in a raw HTTP/1 byte stream, in order.
pub fn statuses(raw: &str) -> Vec<u16> {
    raw.match_indices("HTTP/1.1 ").filter_map(|(i, _)| raw[i + 9..i + 12].parse().ok()).collect()
}

/// ab-style load: `total` GETs of `path` over `concurrency` keep-alive connections. Every
/// body must equal `expect` byte for byte. Returns the number of failed requests.
pub async fn load(addr: SocketAddr, path: &str, expect: Arc<Vec<u8>>, total: usize, concurrency: usize) -> usize {
    let mut set = JoinSet::new();
    for w in 0..concurrency {
        let share = total / concurrency + usize::from(w < total % concurrency);
        let (path, expect) = (path.to_string(), expect.clone());
        set.spawn(async move {
            let mut failed = 0;
            let mut client = Client::connect(addr).await;
            for _ in 0..share {
                match client.get(&path).await {
                    Ok(g) if g.status == 200 && g.body[..] == expect[..] => {}
                    other => {
                        failed += 1;
                        eprintln!("failed request: {:?}", other.map(|g| (g.status, g.body.len())));
                        // The connection may be gone: like ab, carry on with a new one.
                        client = Client::connect(addr).await;
                    }
                }
            }
            failed
        });
    }
    let mut failed = 0;
    while let Some(r) = set.join_next().await {
        failed += r.unwrap();
    }
    failed
}

/// Reads from `s` until the peer closes, within `limit`; None if it did not close in time.
pub async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut out = Vec::new();
    let r = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    r.ok().map(|_| String::from_utf8_lossy(&out).into_owned())
}
pub mod tls;
