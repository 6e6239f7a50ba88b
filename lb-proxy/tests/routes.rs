//! HTTP routes: requests sent to other backends by Host and path prefix, first match wins,
//! the VIP's own backends for the rest; over HTTP/1 (Host, absolute form) and h2 (:authority).
mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use lb_proxy::{HttpRoute, Mode};
use tokio::net::{TcpListener, TcpStream};

fn route(hosts: &[&str], path_prefix: Option<&str>, backend: &Backend) -> HttpRoute {
    HttpRoute {
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        path_prefix: path_prefix.map(str::to_string),
        backends: vec![backend.addr],
    }
}

/// Which backend (`x-backend`) answered a raw HTTP/1.1 request.
async fn served_by(addr: std::net::SocketAddr, request: &str) -> usize {
    let out = raw(addr, request.as_bytes()).await;
    assert_eq!(statuses(&out), vec![200], "{request:?}: {out}");
    let at = out.find("x-backend: ").expect("x-backend") + "x-backend: ".len();
    out[at..at + 1].parse().unwrap()
}

#[tokio::test]
async fn requests_go_to_the_first_route_their_host_and_path_match() {
    let b = [Backend::start(0).await, Backend::start(1).await, Backend::start(2).await];
    let mut spec = http_spec(&b[..1]);
    spec.options.routes = vec![
        route(&["api.test"], None, &b[1]),
        route(&[], Some("/static/"), &b[2]),
        route(&["*.img.test"], Some("/x"), &b[2]),
    ];
    let p = proxy(spec).await;
    let get = |host: &str, path: &str| format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    for (host, path, backend) in [
        ("api.test", "/", 1),
        ("API.test:8080", "/v1/users", 1),
        ("other.test", "/static/app.js", 2),
        ("api.test", "/static/app.js", 1),
        ("a.img.test", "/x/1.png", 2),
        ("a.img.test", "/y/1.png", 0),
        ("img.test", "/x/1.png", 0),
        ("other.test", "/", 0),
        ("other.test", "/staticfile", 0),
    ] {
        assert_eq!(served_by(p.addr, &get(host, path)).await, backend, "{host}{path}");
    }
    // An absolute-form target's authority is the request's host (RFC 9112 §3.2.2).
    let absolute = "GET http://api.test/ HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n";
    assert_eq!(served_by(p.addr, absolute).await, 1);
    // h2: :authority.
    let stream = TcpStream::connect(p.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    for (uri, backend) in [("http://api.test/", "1"), ("http://other.test/static/a", "2"), ("http://other.test/", "0")]
    {
        let resp = send.send_request(hyper::Request::get(uri).body(Full::<Bytes>::default()).unwrap()).await.unwrap();
        assert_eq!(resp.headers()["x-backend"], backend, "{uri}");
        resp.into_body().collect().await.unwrap();
    }
    // Route backends show in the VIP's figures.
    let stats = p.handle.stats().remove(0);
    let addrs: Vec<_> = stats.backends.iter().map(|s| s.addr).collect();
    assert!(b.iter().all(|x| addrs.contains(&x.addr)), "{addrs:?}");
}

#[tokio::test]
async fn a_route_whose_backends_are_down_answers_503_and_others_are_served() {
    let b = [Backend::start(0).await, Backend::start(1).await];
    let mut spec = http_spec(&b[..1]);
    spec.options.routes = vec![route(&["api.test"], None, &b[1])];
    let p = proxy(spec).await;
    p.handle.set_backend_health("web", b[1].addr, false).unwrap();
    let out = raw(p.addr, b"GET / HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n").await;
    assert_eq!(statuses(&out), vec![503], "no fallback to the VIP's own backends: {out}");
    assert_eq!(b[0].hits(), 0);
    let other = "GET / HTTP/1.1\r\nHost: www.test\r\nConnection: close\r\n\r\n";
    assert_eq!(served_by(p.addr, other).await, 0);
    p.handle.set_backend_health("web", b[1].addr, true).unwrap();
    let api = "GET / HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n";
    assert_eq!(served_by(p.addr, api).await, 1);
}

#[tokio::test]
async fn routes_with_mistakes_or_on_tcp_vips_are_refused_at_start() {
    let b = backends(1).await;
    let cases: [(&str, HttpRoute, Mode); 5] = [
        ("everything", route(&[], None, &b[0]), Mode::Http),
        ("no backends", HttpRoute { backends: vec![], ..route(&["a.test"], None, &b[0]) }, Mode::Http),
        ("must start with /", route(&[], Some("static/"), &b[0]), Mode::Http),
        ("is not a host name", route(&["a.test:80"], None, &b[0]), Mode::Http),
        ("apply to HTTP VIPs", route(&["a.test"], None, &b[0]), Mode::Tcp),
    ];
    for (what, r, mode) in cases {
        let mut spec = http_spec(&b);
        spec.mode = mode;
        spec.options.routes = vec![r];
        let listener = TcpListener::bind(loopback()).await.unwrap();
        let e = lb_proxy::Proxy::start_with_listeners(vec![(spec, listener)]).expect_err(what).to_string();
        assert!(e.contains(what), "{what}: {e}");
    }
}
