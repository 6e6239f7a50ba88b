//! Per-VIP HTTP rules: redirecting plain HTTP to HTTPS, and header fields set or removed on
//! requests to the backends and on responses to clients.
mod common;

use common::*;
use lb_proxy::Mode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Reads one response of a kept-alive connection (a head and its small body).
async fn one_response(s: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 16 * 1024];
    let n = tokio::time::timeout(LIMIT, s.read(&mut buf)).await.unwrap().unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn plain_http_is_redirected_to_the_same_url_over_https_and_the_connection_kept() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.https_redirect = Some(308);
    let p = proxy(spec).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /a/b?c=1&d=2 HTTP/1.1\r\nHost: Shop.example:8080\r\n\r\n").await.unwrap();
    let out = one_response(&mut s).await;
    assert_eq!(statuses(&out), vec![308], "{out}");
    assert!(out.to_ascii_lowercase().contains("location: https://shop.example/a/b?c=1&d=2\r\n"), "{out}");
    s.write_all(b"POST /form HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 0\r\n\r\n").await.unwrap();
    let out = one_response(&mut s).await.to_ascii_lowercase();
    assert!(out.contains("location: https://shop.example/form\r\n"), "the same connection answers again: {out}");
    assert_eq!(b[0].hits(), 0, "nothing is forwarded");
}

#[tokio::test]
async fn configured_header_fields_are_set_and_removed_both_ways() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.request_headers = [("X-Env", "prod"), ("X-Secret", ""), ("User-Agent", "lb")]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    spec.options.response_headers = [("Strict-Transport-Security", "max-age=31536000"), ("X-Backend", "")]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    let p = proxy(spec).await;
    let req = "GET /headers HTTP/1.1\r\nHost: x\r\nX-Secret: 1\r\nUser-Agent: curl\r\nConnection: close\r\n\r\n";
    let out = raw(p.addr, req.as_bytes()).await;
    let lower = out.to_ascii_lowercase();
    assert!(lower.contains("\nx-env: prod\n"), "set on the request: {out}");
    assert!(lower.contains("\nuser-agent: lb\n") && !lower.contains("curl"), "replaced: {out}");
    assert!(!lower.contains("x-secret"), "removed from the request: {out}");
    assert!(lower.contains("strict-transport-security: max-age=31536000\r\n"), "set on the response: {out}");
    assert!(!lower.contains("x-backend:"), "removed from the response: {out}");
    // The proxy's own answers carry them too.
    p.handle.set_backend_health("web", b[0].addr, false).unwrap();
    let out = raw(p.addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert_eq!(statuses(&out), vec![503], "{out}");
    assert!(out.to_ascii_lowercase().contains("strict-transport-security: max-age=31536000\r\n"), "{out}");
}

#[tokio::test]
async fn http_rules_with_mistakes_or_where_they_cannot_apply_are_refused_at_start() {
    let b = backends(1).await;
    let set = |n: &str, v: &str| std::iter::once((n.to_string(), v.to_string())).collect();
    let mut cases: Vec<(&str, lb_proxy::ProxyVipSpec)> = Vec::new();
    let mut s = http_spec(&b);
    s.options.https_redirect = Some(200);
    cases.push(("a redirect status is", s));
    let mut s = http_spec(&b);
    s.options.response_headers = set("Transfer-Encoding", "chunked");
    cases.push(("frames the message", s));
    let mut s = http_spec(&b);
    s.options.request_headers = set("Bad Name", "1");
    cases.push(("is not a header name", s));
    let mut s = http_spec(&b);
    s.mode = Mode::Tcp;
    s.options.response_headers = set("X-A", "1");
    cases.push(("apply to HTTP VIPs", s));
    for (what, spec) in cases {
        let listener = TcpListener::bind(loopback()).await.unwrap();
        let e = lb_proxy::Proxy::start_with_listeners(vec![(spec, listener)]).expect_err(what).to_string();
        assert!(e.contains(what), "{what}: {e}");
    }
}

/// A GET with `cookie` (if any) on a fresh connection: (status, x-backend, Set-Cookie value).
async fn get_with_cookie(addr: std::net::SocketAddr, cookie: Option<&str>) -> (u16, usize, Option<String>) {
    let mut req = hyper::Request::get("/").header("host", "x");
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    let got = Client::connect(addr).await.send(req.body(Default::default()).unwrap()).await.unwrap();
    let set = got.headers.get("set-cookie").map(|v| v.to_str().unwrap().to_string());
    (got.status, got.backend(), set)
}

#[tokio::test]
async fn a_sticky_cookie_keeps_a_client_on_its_backend_until_that_backend_is_out() {
    let b = backends(3).await;
    let mut spec = http_spec(&b);
    spec.options.sticky_cookie = Some("lb".into());
    let p = proxy(spec.clone()).await;
    let (status, first, set) = get_with_cookie(p.addr, None).await;
    assert_eq!(status, 200);
    let set = set.expect("a client without the cookie is given one");
    assert!(set.starts_with("lb=") && set.ends_with("; Path=/; HttpOnly"), "{set}");
    let cookie = format!("other=1; {}", set.split(';').next().unwrap());
    for _ in 0..9 {
        let (_, backend, set) = get_with_cookie(p.addr, Some(&cookie)).await;
        assert_eq!((backend, set), (first, None), "round robin would have moved it");
    }
    // Another balancer of the VIP (same backends, same seed) reads the cookie alike.
    let other = proxy(spec).await;
    assert_eq!(get_with_cookie(other.addr, Some(&cookie)).await.1, first);
    // Its backend out of rotation: served elsewhere, and told so.
    p.handle.set_backend_health("web", b[first].addr, false).unwrap();
    let (status, moved, set) = get_with_cookie(p.addr, Some(&cookie)).await;
    assert!(status == 200 && moved != first, "{moved}");
    assert!(set.is_some_and(|s| !s.starts_with(cookie.split("; ").nth(1).unwrap())), "a new cookie names {moved}");
    // A cookie that names nothing is no cookie.
    assert!(get_with_cookie(p.addr, Some("lb=zz")).await.2.is_some());
}

#[tokio::test]
async fn request_ids_reach_the_backend_and_come_back_the_clients_own_kept() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.request_id = true;
    let p = proxy(spec).await;
    let got = fetch(p.addr, "/headers").await;
    let id = got.headers["x-request-id"].to_str().unwrap().to_string();
    assert!(id.len() == 32 && id.bytes().all(|c| c.is_ascii_hexdigit()), "{id}");
    assert!(got.text().contains(&format!("\nx-request-id: {id}\n")), "the backend saw it: {}", got.text());
    let req = hyper::Request::get("/headers").header("host", "x").header("x-request-id", "from-edge-7");
    let got = Client::connect(p.addr).await.send(req.body(Default::default()).unwrap()).await.unwrap();
    assert_eq!(got.headers["x-request-id"], "from-edge-7");
    assert!(got.text().contains("\nx-request-id: from-edge-7\n"), "{}", got.text());
    assert_ne!(fetch(p.addr, "/").await.headers["x-request-id"], id.as_str(), "a new one each time");
    // The proxy's own answers carry one too.
    p.handle.set_backend_health("web", b[0].addr, false).unwrap();
    let got = fetch(p.addr, "/").await;
    assert_eq!(got.status, 503);
    assert_eq!(got.headers["x-request-id"].len(), 32);
}
