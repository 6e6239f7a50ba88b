//! TLS: termination (h1 and h2 by ALPN, byte-exact), certificates by SNI, bad certificate
//! files, certificate reload without dropping connections, TLS to backends, and passthrough
//! routing by the ClientHello's server name.
mod common;

use std::time::Duration;

use bytes::Bytes;
use common::tls::*;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use lb_proxy::{BackendSpec, BackendTls, Mode, ProxyVipSpec, SniRoute, SniRouting, TlsTermination};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn termination(leaves: &[&Leaf]) -> TlsTermination {
    TlsTermination {
        certificates: leaves.iter().map(|l| certificate_files(l)).collect(),
        alpn: vec!["h2".into(), "http/1.1".into()],
        min_version: "1.2".into(),
    }
}

fn tls_spec(b: &[Backend], leaves: &[&Leaf]) -> ProxyVipSpec {
    let mut spec = http_spec(b);
    spec.options.tls = Some(termination(leaves));
    spec
}

fn get_req(path: &str) -> Request<Full<Bytes>> {
    Request::get(path).header("host", "a.test").body(Full::default()).unwrap()
}

#[tokio::test]
async fn http1_and_h2_over_tls_are_byte_exact_and_alpn_decides() {
    let ca = Ca::new();
    let a = ca.leaf("a", &["a.test"]);
    let b = backends(1).await;
    let p = proxy(tls_spec(&b, &[&a])).await;
    let len = 300 * 1024 + 7;

    // HTTP/1.1 (ALPN http/1.1).
    let s = connect(ca.client_config(&["http/1.1"]), p.addr, "a.test").await.unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await.unwrap();
    tokio::spawn(conn);
    let resp = send.send_request(get_req(&format!("/bytes/{len}"))).await.unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(body[..] == pattern(len)[..], "h1 body differs");
    let resp = send.send_request(get_req("/headers")).await.unwrap();
    let text = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(text.contains("x-forwarded-proto: https\n"), "{text}");

    // h2 (ALPN h2), several streams on one connection.
    let s = connect(ca.client_config(&["h2", "http/1.1"]), p.addr, "a.test").await.unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s)).await.unwrap();
    tokio::spawn(conn);
    let mut streams = Vec::new();
    for k in 0..4 {
        let mut send = send.clone();
        streams.push(tokio::spawn(async move {
            let n = len + k;
            let req = Request::get(format!("https://a.test/bytes/{n}")).body(Full::<Bytes>::default()).unwrap();
            let resp = send.send_request(req).await.unwrap();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            body[..] == pattern(n)[..]
        }));
    }
    for s in streams {
        assert!(s.await.unwrap(), "h2 body differs");
    }
}

#[tokio::test]
async fn certificate_is_chosen_by_sni_with_the_first_as_default() {
    let ca = Ca::new();
    let a = ca.leaf("a", &["a.test"]);
    let w = ca.leaf("w", &["*.w.test"]);
    let b = backends(1).await;
    let p = proxy(tls_spec(&b, &[&a, &w])).await;
    let cfg = ca.client_config(&["http/1.1"]);
    let s = connect(cfg.clone(), p.addr, "x.w.test").await.unwrap();
    assert_eq!(peer_leaf(&s), w.der, "wildcard name");
    let s = connect(cfg.clone(), p.addr, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&s), a.der);
    // Unknown name: the first certificate is served (and this client rejects it).
    assert!(connect(cfg, p.addr, "other.test").await.is_err());
}

#[tokio::test]
async fn bad_certificate_files_are_clear_errors_at_load() {
    let ca = Ca::new();
    let a = ca.leaf("a", &["a.test"]);
    let other = ca.leaf("other", &["o.test"]);
    let garbage = ca.dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let missing = ca.dir.path().join("missing.pem");
    let cases = [
        ("missing chain", missing.clone(), a.key.clone(), "cannot read"),
        ("missing key", a.chain.clone(), missing.clone(), "cannot read"),
        ("garbage chain", garbage.clone(), a.key.clone(), "no PEM certificate"),
        ("garbage key", a.chain.clone(), garbage.clone(), "no usable PEM private key"),
        ("mismatched key", a.chain.clone(), other.key.clone(), "does not belong"),
    ];
    for (what, chain, key, expect) in cases {
        let mut spec = ProxyVipSpec::new("tls", loopback(), Mode::Http);
        spec.options.tls = Some(TlsTermination {
            certificates: vec![lb_proxy::CertificateFiles { chain, key }],
            alpn: vec!["http/1.1".into()],
            min_version: "1.2".into(),
        });
        let l = TcpListener::bind(loopback()).await.unwrap();
        let e = lb_proxy::Proxy::start_with_listeners(vec![(spec, l)]).expect_err(what).to_string();
        assert!(e.contains(expect), "{what}: {e}");
    }
}

#[tokio::test]
async fn reload_swaps_the_certificate_without_dropping_connections() {
    let ca = Ca::new();
    let first = ca.leaf("site", &["a.test"]);
    let b = backends(1).await;
    let p = proxy(tls_spec(&b, &[&first])).await;
    let cfg = ca.client_config(&["http/1.1"]);
    let s = connect(cfg.clone(), p.addr, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&s), first.der);
    let (mut old, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await.unwrap();
    tokio::spawn(conn);
    assert_eq!(old.send_request(get_req("/")).await.unwrap().status(), 200);

    let second = ca.leaf("site", &["a.test"]); // same files, new certificate
    assert!(p.handle.reload_tls("web").unwrap());
    // A fresh client: a resumed session would report the certificate of its first handshake.
    drop(cfg);
    let s = connect(ca.client_config(&["http/1.1"]), p.addr, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&s), second.der, "new handshakes get the new certificate");
    assert_eq!(old.send_request(get_req("/")).await.unwrap().status(), 200, "the established connection keeps working");
    // A broken file on reload changes nothing.
    std::fs::write(&second.key, "broken").unwrap();
    assert!(p.handle.reload_tls("web").is_err());
    let s = connect(ca.client_config(&["http/1.1"]), p.addr, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&s), second.der);
}

#[tokio::test]
async fn tls_to_backends_checks_the_backend_certificate() {
    let ca = Ca::new();
    let leaf = ca.leaf("backend", &["backend.test"]);
    let acceptor = acceptor(&leaf.chain, &leaf.key);
    let l = TcpListener::bind(loopback()).await.unwrap();
    let backend_addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(s) = acceptor.accept(s).await else {
                    return;
                };
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"over tls"))))
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc).await;
            });
        }
    });
    for (name, ok) in [("backend.test", true), ("wrong.test", false)] {
        let mut spec = ProxyVipSpec::new("web", loopback(), Mode::Http);
        spec.backends = vec![BackendSpec::new(backend_addr)];
        spec.options.backend_tls = Some(BackendTls { ca_file: ca.ca_file(), server_name: name.into() });
        let p = proxy(spec).await;
        let g = fetch(p.addr, "/").await;
        if ok {
            assert_eq!((g.status, g.text().as_str()), (200, "over tls"));
        } else {
            assert_eq!(g.status, 502, "a certificate for another name is refused");
        }
    }
}

fn sni_spec(default: std::net::SocketAddr, routes: Vec<SniRoute>) -> ProxyVipSpec {
    let mut spec = ProxyVipSpec::new("pass", loopback(), Mode::Tcp);
    spec.backends = vec![BackendSpec::new(default)];
    spec.options.sni = Some(SniRouting { routes });
    spec.options.timeouts.handshake = Duration::from_millis(300);
    spec
}

#[tokio::test]
async fn passthrough_routes_by_server_name_with_a_default_set() {
    let ca = Ca::new();
    let a = ca.leaf("a", &["a.test"]);
    let w = ca.leaf("w", &["*.w.test"]);
    let d = ca.leaf("d", &["d.test", "none.test"]);
    let (a_addr, _ta) = tls_id_server(&a, "backend-a").await;
    let (w_addr, _tw) = tls_id_server(&w, "backend-w").await;
    let (d_addr, _td) = tls_id_server(&d, "backend-default").await;
    let routes = vec![
        SniRoute { names: vec!["a.test".into()], backends: vec![a_addr] },
        SniRoute { names: vec!["*.w.test".into()], backends: vec![w_addr] },
    ];
    let p = proxy(sni_spec(d_addr, routes)).await;
    let cfg = ca.client_config(&[]);
    for (name, expect) in [("a.test", "backend-a"), ("x.w.test", "backend-w"), ("d.test", "backend-default")] {
        // TLS is end to end: the certificate checked is the backend's own.
        let mut s = connect(cfg.clone(), p.addr, name).await.unwrap();
        s.write_all(b"hi").await.unwrap();
        let mut got = String::new();
        s.read_to_string(&mut got).await.unwrap();
        assert_eq!(got, expect, "{name}");
    }
}

#[tokio::test]
async fn passthrough_drops_garbage_and_silent_clients() {
    let (d_addr, conns) = tcp_counting_backend().await;
    let p = proxy(sni_spec(d_addr, Vec::new())).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let out = read_until_closed(&mut s, Duration::from_secs(5)).await;
    assert_eq!(out.as_deref(), Some(""), "garbage instead of a ClientHello is dropped");
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let out = read_until_closed(&mut s, Duration::from_secs(5)).await;
    assert_eq!(out.as_deref(), Some(""), "a client that never says hello is dropped");
    assert_eq!(conns.load(std::sync::atomic::Ordering::Relaxed), 0);
    for _ in 0..100 {
        if p.handle.stats()[0].tls_failures == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(p.handle.stats()[0].tls_failures, 2);
}

/// A TCP backend that only counts connections.
async fn tcp_counting_backend() -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    let l = TcpListener::bind(loopback()).await.unwrap();
    let addr = l.local_addr().unwrap();
    let n = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = n.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(s);
        }
    });
    (addr, n)
}

#[tokio::test]
async fn tls_versions_and_garbage_on_a_terminating_vip() {
    let ca = Ca::new();
    let a = ca.leaf("a", &["a.test"]);
    let b = backends(1).await;
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let tls12_only = std::sync::Arc::new(
        tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&tokio_rustls::rustls::version::TLS12])
            .unwrap()
            .with_root_certificates(ca.roots())
            .with_no_client_auth(),
    );
    let p = proxy(tls_spec(&b, &[&a])).await;
    let s = connect(tls12_only.clone(), p.addr, "a.test").await.unwrap();
    assert_eq!(s.get_ref().1.protocol_version(), Some(tokio_rustls::rustls::ProtocolVersion::TLSv1_2));
    let s = connect(ca.client_config(&[]), p.addr, "a.test").await.unwrap();
    assert_eq!(s.get_ref().1.protocol_version(), Some(tokio_rustls::rustls::ProtocolVersion::TLSv1_3));

    let mut spec = tls_spec(&b, &[&a]);
    spec.options.tls.as_mut().unwrap().min_version = "1.3".into();
    spec.options.timeouts.handshake = Duration::from_millis(300);
    let p = proxy(spec).await;
    assert!(connect(tls12_only, p.addr, "a.test").await.is_err(), "TLS 1.2 refused");
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n").await.unwrap();
    let out = read_until_closed(&mut s, Duration::from_secs(5)).await;
    assert!(out.is_some_and(|o| !o.contains("HTTP/1.1 200")), "plain HTTP is no handshake");
    let mut silent = TcpStream::connect(p.addr).await.unwrap();
    let out = read_until_closed(&mut silent, Duration::from_secs(5)).await;
    assert_eq!(out.as_deref(), Some(""), "a silent client is dropped after the handshake timeout");
    // Counted just after the connection is dropped: wait for it (bounded).
    for _ in 0..100 {
        if p.handle.stats()[0].tls_failures == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(p.handle.stats()[0].tls_failures, 3);
    assert_eq!(b[0].hits(), 0);
}

/// The server's suite order decides, and it puts AES-128-GCM-SHA256 first: a client that
/// prefers AES-256-GCM-SHA384 (rustls's and OpenSSL's default order) gets AES-128, whose
/// SHA-256 runs on the CPU's SHA extensions. With only SHA-384 offered, SHA-384 is used.
#[tokio::test]
async fn the_server_prefers_the_sha256_suites() {
    use rustls::CipherSuite::{TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384};
    let ca = Ca::new();
    let a = ca.leaf("a", &["a.test"]);
    let b = backends(1).await;
    let p = proxy(tls_spec(&b, &[&a])).await;
    let default = ca.client_config(&["http/1.1"]);
    let offered: Vec<_> = default.crypto_provider().cipher_suites.iter().map(|s| s.suite()).collect();
    assert_eq!(offered[0], TLS13_AES_256_GCM_SHA384, "the client prefers SHA-384");
    let s = connect(default.clone(), p.addr, "a.test").await.unwrap();
    assert_eq!(s.get_ref().1.negotiated_cipher_suite().map(|c| c.suite()), Some(TLS13_AES_128_GCM_SHA256));

    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.retain(|s| s.suite() == TLS13_AES_256_GCM_SHA384);
    let only_sha384 = rustls::ClientConfig::builder_with_provider(provider.into())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(ca.roots())
        .with_no_client_auth();
    let s = connect(std::sync::Arc::new(only_sha384), p.addr, "a.test").await.unwrap();
    assert_eq!(s.get_ref().1.negotiated_cipher_suite().map(|c| c.suite()), Some(TLS13_AES_256_GCM_SHA384));
}
